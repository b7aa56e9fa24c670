//! report.html in headless Chromium: every section drawn (a screenshot of each is not blank),
//! the charts hold the run's own numbers (read back from the DOM and checked against the
//! record), and hostile text in the record never runs or loads anything.

use crate::common;

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use common::{dump_dom, kiln, screenshot};
use kiln_targets::{Behavior, TargetServer};
use serde_json::Value;

/// `data-NAME='...'` of the first element that has it, as JSON (Chromium writes attribute
/// values with `&quot;`).
fn data_attr(dom: &str, name: &str) -> Vec<Value> {
    let marker = format!("{name}=\"");
    dom.match_indices(&marker)
        .map(|(at, _)| {
            let rest = &dom[at + marker.len()..];
            let end = rest.find('"').unwrap();
            let text = rest[..end].replace("&quot;", "\"").replace("&amp;", "&");
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        })
        .collect()
}

use common::load_seconds as seconds;

/// The samples of a collapsed-stacks file.
fn on_cpu_total(folded: &str) -> u64 {
    (folded.lines())
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(_, n)| n.parse::<u64>().unwrap())
        .sum()
}

/// The share a flame graph's search matched, in percent, with the page opened at `hash`.
fn match_share(page: &std::path::Path, hash: &str) -> f64 {
    let searched = common::dump_dom_at(page, hash);
    searched
        .split("matched: ")
        .nth(1)
        .and_then(|t| t.split('%').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no match share at {hash}: {searched}"))
}

/// Counts pixels unlike the page's background in a band of the screenshot.
fn drawn_pixels(png: &Path, top: u32, height: u32) -> usize {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(png).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    let (w, h) = (info.width as usize, info.height as usize);
    let background = [0xfa, 0xfa, 0xfa];
    let mut drawn = 0;
    for y in (top as usize)..((top + height) as usize).min(h) {
        for x in 0..w {
            let at = (y * w + x) * channels;
            let px = &buf[at..at + 3];
            if px != background && px != [0xff, 0xff, 0xff] {
                drawn += 1;
            }
        }
    }
    drawn
}

#[test]
fn every_section_is_drawn_and_the_charts_hold_the_runs_numbers() {
    let _turn = common::group("report");
    let tmp = tempfile::tempdir().unwrap();
    let target = TargetServer::start(Behavior {
        service_time: Duration::from_millis(1),
        // a known hot function for the flame graph
        cpu_per_request: Duration::from_micros(500),
        ..Behavior::default()
    })
    .unwrap();
    let dir = tmp.path().join("run");
    // the target lives in this test process: kiln watches it
    let pid = std::process::id().to_string();
    let out = kiln(&[
        "run",
        &target.url("/"),
        "--rate",
        "200",
        "-d",
        "3s",
        "--warmup",
        "1s",
        "--repeat",
        "2",
        "--watch-pid",
        &pid,
        "--profile",
        "--profile-frequency",
        "499",
        "--off-cpu",
        "-q",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("report.html"), "{stdout}");
    let page = dir.join("report.html");
    let manifest = common::manifest(&dir);
    assert!(
        manifest.to_string().contains("\"report-html\""),
        "{manifest}"
    );

    let dom = dump_dom(&page);
    // One run, one number: the summary (`kiln report --json`), the findings' symptoms and the
    // page read the same measured window (two repeats, merged) and give the same figures.
    let summary = common::json_with_exit(&kiln(&["report", dir.to_str().unwrap(), "--json"]), 0);
    let findings: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("findings.json")).unwrap()).unwrap();
    let (total, symptoms) = (&summary["total"], &findings["symptoms"]);
    assert_eq!(symptoms["p50_us"], total["latency"]["p50_us"], "{symptoms}");
    assert_eq!(symptoms["p99_us"], total["latency"]["p99_us"], "{symptoms}");
    let throughput = total["throughput_rps"].as_f64().unwrap();
    assert!(
        (symptoms["throughput"].as_f64().unwrap() - throughput).abs() < 1e-9,
        "{symptoms} {total}"
    );
    let line = format!("{} requests, {throughput:.1}/s", total["requests"]);
    assert!(dom.contains(&line), "{line} not on the page");
    // the page's p99 in its summary line and in its symptoms are one figure
    let in_line = (dom.split("% failed; p50 ").nth(1))
        .and_then(|rest| rest.split(", p99 ").nth(1))
        .and_then(|rest| rest.split(',').next());
    let in_symptoms = (dom.split("<li>p99 ").nth(1)).and_then(|rest| rest.split(':').next());
    assert!(
        in_line.is_some() && in_line == in_symptoms,
        "{in_line:?} {in_symptoms:?}"
    );
    // the host checks the run took, as many ok and not as doctor.json says
    let doctor: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("doctor.json")).unwrap()).unwrap();
    let checks = doctor["checks"].as_array().unwrap();
    let ok = checks.iter().filter(|c| c["verdict"] == "ok").count();
    assert!(
        dom.contains(&format!(
            "{ok} of {} checks ok as the run started",
            checks.len()
        )),
        "{dom}"
    );
    assert_eq!(
        dom.matches("<tr class=\"check-").count(),
        checks.len() - ok,
        "every check that is not ok has its row"
    );
    let charts: Vec<Value> = data_attr(&dom, "data-check");
    // latency, throughput, distribution; host CPU, per core, kernel events; the target's
    // CPU, switches, memory, threads by state (its sockets when it has queues); the flame graph
    for label in [
        "p99",
        "requests/s",
        "all measured",
        "steal",
        "cpu0",
        "listen overflows",
        "voluntary",
        "RSS MiB",
        "running",
    ] {
        assert!(
            charts.iter().any(|c| c["sums"].get(label).is_some()),
            "no chart has {label}: {charts:?}"
        );
    }
    let series = |label: &str| -> f64 {
        charts
            .iter()
            .find_map(|c| c["sums"][label].as_f64())
            .unwrap_or_else(|| panic!("no series {label}: {charts:?}"))
    };
    // the throughput chart adds up to every request of the record (warm-up included)
    let seconds = seconds(&dir);
    let requests: u64 = seconds
        .iter()
        .map(|s| s["requests"].as_u64().unwrap())
        .sum();
    assert!(requests > 700, "{requests}");
    assert_eq!(series("requests/s") as u64, requests);
    // and the p99 line is the record's own per-second p99
    let p99_ms: f64 = seconds
        .iter()
        .filter(|s| s["requests"].as_u64().unwrap() > 0)
        .map(|s| s["latency_p50_p90_p99_max_us"][2].as_f64().unwrap() / 1000.0)
        .sum();
    assert!(
        (series("p99") - p99_ms).abs() < 0.01,
        "{} vs {p99_ms}",
        series("p99")
    );
    // the wire: the connections the record says each second opened
    let opened: u64 = seconds
        .iter()
        .map(|s| s["wire"]["connects"].as_u64().unwrap_or(0))
        .sum();
    assert!(opened > 0);
    assert_eq!(series("connections opened/s") as u64, opened);
    // the resources: as many seconds as the sampler wrote
    let sampled = std::fs::read_to_string(dir.join("resources.jsonl"))
        .unwrap()
        .lines()
        .count();
    let host = charts
        .iter()
        .find(|c| c["sums"].get("steal").is_some())
        .unwrap();
    assert_eq!(host["points"].as_u64().unwrap() as usize, sampled);
    // the host's noise: every second kiln measured its own waits, as noise.jsonl holds them
    let noise: Vec<Value> = std::fs::read_to_string(dir.join("noise.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // warm-up and two repeats of 3 s
    assert!(noise.len() >= 6, "{noise:?}");
    let late: f64 = noise
        .iter()
        .map(|s| s["probe_late_max_ms"].as_f64().unwrap())
        .sum();
    assert!((series("probe woke late") - late).abs() < 0.01, "{late}");
    let noise_chart = charts
        .iter()
        .find(|c| c["sums"].get("probe woke late").is_some())
        .unwrap();
    assert_eq!(
        noise_chart["points"].as_u64().unwrap() as usize,
        noise.len()
    );

    // the flame graph holds every sample of the profile, and its search finds the hot
    // function with the share the profile's table gives it
    let flame = charts
        .iter()
        .find(|c| c.get("frames").is_some())
        .unwrap_or_else(|| panic!("no flame graph: {dom}"));
    assert_eq!(flame["root"], flame["total"]);
    assert!(flame["frames"].as_u64().unwrap() > 10, "{flame}");
    let hot = "kiln_targets::burn_cpu_for_request";
    let row_start = dom
        .find(&format!("<code>{hot}</code>"))
        .unwrap_or_else(|| panic!("{hot} not in the profile table: {dom}"));
    let table_total: f64 = dom[row_start..]
        .split("<td class=\"n\">")
        .nth(2)
        .and_then(|cell| cell.split('%').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    let matched = match_share(&page, &format!("#search={hot}"));
    assert!(matched > 5.0, "{matched}");
    assert!(
        (matched - table_total).abs() < 0.6,
        "{matched} vs {table_total}"
    );

    // the off-CPU flame graph holds every switch of offcpu.folded, and its search gives the
    // share of the switches whose stacks hold the request's sleep, as counted from the file
    let off_cpu = charts
        .iter()
        .filter(|c| c.get("frames").is_some())
        .nth(1)
        .unwrap_or_else(|| panic!("no off-CPU flame graph: {dom}"));
    let folded = std::fs::read_to_string(dir.join("offcpu.folded")).unwrap();
    let count = |pick: &dyn Fn(&str) -> bool| -> u64 {
        folded
            .lines()
            .filter_map(|l| l.rsplit_once(' '))
            .filter(|(stack, _)| pick(stack))
            .map(|(_, n)| n.parse::<u64>().unwrap())
            .sum()
    };
    let switches = count(&|_| true);
    assert_eq!(off_cpu["total"].as_u64(), Some(switches), "{off_cpu}");
    let sleeping = count(&|stack| stack.contains("nanosleep"));
    let matched = match_share(&page, "#offcpu-search=nanosleep");
    let expected = 100.0 * sleeping as f64 / switches as f64;
    // the share depends on how often a busy machine preempts the target: present is enough,
    // what is checked is that the page finds what the file holds
    assert!(sleeping >= 100, "{sleeping} of {switches} switches sleep");
    assert!(
        (matched - expected).abs() < 0.6,
        "{matched}% matched in the page, {expected}% in offcpu.folded"
    );

    // as a user uses it: hover, search, the callers view, a chart's hover, a narrow window
    let used = common::in_page(
        &page,
        1300,
        r#"
        var out = {};
        var box = page.getElementById('flame');
        var cell = box.querySelectorAll('.fr')[1];
        cell.dispatchEvent(new MouseEvent('mouseover', { bubbles: true }));
        out.name = cell.textContent;
        out.status = page.getElementById('flame-status').textContent;
        var search = page.getElementById('flame-search');
        search.value = cell.textContent.toLowerCase().replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
        search.dispatchEvent(new Event('input'));
        out.lower = page.getElementById('flame-match').textContent;
        search.value = '(';
        search.dispatchEvent(new Event('input'));
        out.bad = page.getElementById('flame-match').textContent;
        out.forward = JSON.parse(box.getAttribute('data-check'));
        var reverse = page.getElementById('flame-reverse');
        reverse.checked = true;
        reverse.dispatchEvent(new Event('change'));
        out.view = box.getAttribute('data-view');
        out.callers = JSON.parse(box.getAttribute('data-check'));
        var tops = [].map.call(box.querySelectorAll('.fr'), function (e) { return parseFloat(e.style.top); });
        out.min_top = Math.min.apply(null, tops);
        var over = page.querySelector('#chart-latency .u-over');
        var r = over.getBoundingClientRect();
        over.dispatchEvent(new MouseEvent('mousemove',
          { clientX: r.left + r.width / 2, clientY: r.top + r.height / 2, bubbles: true }));
        await wait(200);
        out.hover_time = page.querySelector('#chart-latency .u-legend .u-series .u-value').textContent;
        frame.width = 900;
        // headless Chromium sends the frame's resize event late after a synthetic mousemove
        // (a browser sends it at once): sent here, the page's own handler reflows
        frame.contentWindow.dispatchEvent(new Event('resize'));
        await wait(600);
        out.scroll = [page.documentElement.scrollWidth, page.documentElement.clientWidth];
        out.charts = [].map.call(page.querySelectorAll('.uplot'), function (e) { return e.getBoundingClientRect().right; });
        done(out);
        "#,
    );
    let name = used["name"].as_str().unwrap();
    let status = used["status"].as_str().unwrap();
    assert!(
        status.starts_with(&format!("{name}: ")) && status.contains("% of all"),
        "{used:#}"
    );
    let lower = used["lower"].as_str().unwrap();
    let lower_share: f64 = lower
        .strip_prefix("matched: ")
        .and_then(|t| t.split('%').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{used:#}"));
    assert!(
        lower_share > 0.0,
        "a search in lower case found nothing: {used:#}"
    );
    assert!(
        used["bad"]
            .as_str()
            .unwrap()
            .contains("not a regular expression"),
        "{used:#}"
    );
    // the callers view holds the same samples, turned over
    assert_eq!(used["view"], "callers", "{used:#}");
    assert_eq!(
        used["callers"]["total"], used["forward"]["total"],
        "{used:#}"
    );
    assert!(used["callers"]["frames"].as_u64().unwrap() > 1, "{used:#}");
    // no blank rows above the frames: the deepest drawn is at the top of the box
    assert_eq!(used["min_top"].as_f64(), Some(0.0), "{used:#}");
    // hover time: UTC with seconds, as the findings speak
    let hover = used["hover_time"].as_str().unwrap();
    let shape: String = hover
        .chars()
        .map(|c| if c.is_ascii_digit() { '9' } else { c })
        .collect();
    assert_eq!(shape, "9999-99-99 99:99:99 UTC", "{used:#}");
    // in a 900 px window: no sideways scroll, every chart inside it
    let scroll = used["scroll"].as_array().unwrap();
    assert!(scroll[0].as_u64() <= scroll[1].as_u64(), "{used:#}");
    for right in used["charts"].as_array().unwrap() {
        assert!(right.as_f64().unwrap() <= 900.0, "{used:#}");
    }

    // a screenshot of each section has something drawn in it
    let layout = data_attr(&dom, "data-layout").remove(0);
    let bottom = layout
        .as_object()
        .unwrap()
        .values()
        .map(|v| v[0].as_u64().unwrap() + v[1].as_u64().unwrap())
        .max()
        .unwrap();
    let png = tmp.path().join("page.png");
    screenshot(&page, &png, 1300, bottom as u32 + 50);
    for (section, at) in layout.as_object().unwrap() {
        let (top, height) = (
            at[0].as_u64().unwrap() as u32,
            at[1].as_u64().unwrap() as u32,
        );
        let drawn = drawn_pixels(&png, top, height);
        assert!(
            drawn > 500,
            "section {section} looks blank ({drawn} pixels drawn) in {layout}"
        );
    }
    // the charts are the biggest part: far more is drawn there than in a text section
    let load = &layout["load"];
    let drawn = drawn_pixels(
        &png,
        load[0].as_u64().unwrap() as u32,
        load[1].as_u64().unwrap() as u32,
    );
    assert!(
        drawn > 20_000,
        "the load charts look empty ({drawn} pixels)"
    );

    // two profiled runs compared: BASE had a function NEW no longer calls. The differential
    // flame graph's BASE view finds it by search, NEW's view does not have it.
    let base = tmp.path().join("base");
    std::fs::create_dir(&base).unwrap();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), base.join(entry.file_name())).unwrap();
        }
    }
    let mut folded = std::fs::read_to_string(base.join("profile.folded")).unwrap();
    folded += &format!("kiln_test;Removed_By_The_Fix {}\n", on_cpu_total(&folded));
    std::fs::write(base.join("profile.folded"), folded).unwrap();
    let compared = tmp.path().join("compare.html");
    let out = kiln(&[
        "compare",
        base.to_str().unwrap(),
        dir.to_str().unwrap(),
        "--html",
        compared.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let found = common::in_page(
        &compared,
        1300,
        r#"
        var out = {};
        ['diff-base', 'diff-new'].forEach(function (id) {
          var search = page.getElementById(id + '-search');
          search.value = 'removed_by';
          search.dispatchEvent(new Event('input'));
          out[id] = page.getElementById(id + '-match').textContent;
          var hit = page.querySelector('#' + id + ' .fr.hit');
          if (hit) {
            hit.dispatchEvent(new MouseEvent('mouseover', { bubbles: true }));
            out[id + '-status'] = page.getElementById(id + '-status').textContent;
          }
        });
        done(out);
        "#,
    );
    // BASE doubled its samples with the function: half of BASE's view, none of NEW's
    let share = |id: &str| -> f64 {
        found[id]
            .as_str()
            .and_then(|t| t.strip_prefix("matched: "))
            .and_then(|t| t.split('%').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{found:#}"))
    };
    assert!((share("diff-base") - 50.0).abs() < 0.01, "{found:#}");
    assert_eq!(share("diff-new"), 0.0, "{found:#}");
    let status = found["diff-base-status"].as_str().unwrap_or_default();
    assert!(
        status.starts_with("Removed_By_The_Fix: NEW 0 samples (0.00%), BASE ")
            && status.ends_with("(50.00%): gone in NEW"),
        "{found:#}"
    );

    // kiln report --html rebuilds the page from the directory, and writes elsewhere too
    let copy = tmp.path().join("copy.html");
    let out = kiln(&[
        "report",
        dir.to_str().unwrap(),
        "--html",
        copy.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let rebuilt = std::fs::read_to_string(&copy).unwrap();
    assert!(rebuilt.contains("kiln report"), "{rebuilt}");
}

#[test]
fn hostile_text_in_the_record_stays_text_and_loads_nothing() {
    let _turn = common::group("report");
    let tmp = tempfile::tempdir().unwrap();
    // anything the page loads or runs calls home here
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let home = format!("http://{}/", listener.local_addr().unwrap());
    let payloads = [
        format!("</script><script>fetch('{home}s');document.title='PWNED'</script>"),
        format!("\"><img src=\"{home}i\" onerror=\"document.title='PWNED'\">"),
        format!("javascript:fetch('{home}j')"),
        "\u{2028}\u{2029}</style><style>body{display:none}</style>".to_string(),
        format!("<link rel=stylesheet href=\"{home}c\"><iframe src=\"{home}f\"></iframe>"),
    ];
    let all = payloads.join(" ");

    let target = TargetServer::start(Behavior::default()).unwrap();
    let dir = tmp.path().join("run");
    let header = format!("X-Payload: {}", payloads[1]);
    let out = kiln(&[
        "run",
        &target.url("/search?q=%3C/script%3E%3Cscript%3Ealert(1)%3C/script%3E"),
        "--rate",
        "50",
        "-d",
        "1s",
        "-H",
        &header,
        "--name",
        &payloads[0],
        "-q",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // a record handed over by someone else: every text field the page shows is hostile
    let findings_path = dir.join("findings.json");
    let mut findings: Value =
        serde_json::from_str(&std::fs::read_to_string(&findings_path).unwrap()).unwrap();
    findings["findings"] = serde_json::json!([{
        "id": all, "rule": all, "severity": "high", "title": all,
        "evidence": payloads, "window": {"from_unix_ms": 1, "to_unix_ms": 2}, "cause": all,
        "fix": all, "impact": {"share": 0.5, "of": all},
        "flame": {"event": "cpu", "frame": payloads[0]},
        "data": {"frames": payloads.iter().map(|p| serde_json::json!([p, 0.5])).collect::<Vec<_>>()}
    }]);
    findings["unjudged"] = serde_json::json!([{"rule": all, "reason": all}]);
    std::fs::write(&findings_path, findings.to_string()).unwrap();
    let run_json = dir.join("run.json");
    let mut manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(&run_json).unwrap()).unwrap();
    manifest["command"] = serde_json::json!(payloads);
    // and a profile whose frames are the payloads
    let folded: String = payloads
        .iter()
        .map(|p| format!("main;{} 100\n", p.replace(';', ":").replace('\n', " ")))
        .collect();
    std::fs::write(dir.join("profile.folded"), folded).unwrap();
    // and DB calls whose routes, statements and frames are the payloads
    let trie: String = payloads
        .iter()
        .map(|p| {
            let p = p.replace(';', ":").replace('\n', " ");
            format!("GET /{p};{p} (app.py:1);SQL SELECT '{p}' 3\n")
        })
        .collect();
    std::fs::write(dir.join("db-trie-calls.folded"), &trie).unwrap();
    std::fs::write(dir.join("db-trie-time.folded"), &trie).unwrap();
    let routes: Vec<Value> = payloads
        .iter()
        .map(|p| {
            serde_json::json!({"route": p, "requests": 1, "calls_median": 3,
            "top_queries": [{"calls": 3, "shape": p}]})
        })
        .collect();
    std::fs::write(
        dir.join("queries.json"),
        serde_json::json!({"analysis": {"routes": routes, "coverage": {"db_spans": 15}}})
            .to_string(),
    )
    .unwrap();
    // and host checks whose texts are the payloads (the run wrote doctor.json already)
    let checks: Vec<Value> = payloads
        .iter()
        .map(|p| serde_json::json!({"id": p, "verdict": "bad", "evidence": p, "why": p, "fix": p}))
        .collect();
    std::fs::write(
        dir.join("doctor.json"),
        serde_json::json!({"pid": null, "checks": checks}).to_string(),
    )
    .unwrap();
    for (kind, path) in [
        ("db-trie-calls", "db-trie-calls.folded"),
        ("db-trie-time", "db-trie-time.folded"),
        ("queries", "queries.json"),
    ] {
        manifest["parts"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"kind": kind, "path": path, "schema_version": 1}));
    }
    manifest["parts"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"kind": "profile-folded", "path": "profile.folded", "schema_version": 1}));
    manifest["id"] = Value::String(all.clone());
    std::fs::write(&run_json, manifest.to_string()).unwrap();

    let out = kiln(&["report", dir.to_str().unwrap(), "--html"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = dir.join("report.html");
    let dom = dump_dom(&page);
    screenshot(&page, &tmp.path().join("p.png"), 1200, 2000);

    // latency, throughput, the distribution, the host's noise and the wire: the page's own
    // script ran
    assert!(
        dom.contains("data-charts=\"5\""),
        "the page's own script ran: {dom}"
    );
    assert!(!dom.contains("PWNED</title>"), "{dom}");
    assert!(!dom.contains("<img src=\"http"), "{dom}");
    assert!(!dom.contains("<iframe"), "{dom}");
    assert!(!dom.contains("<link rel"), "{dom}");
    // the finding's link to its frame is an address within the page, whatever the frame
    assert!(dom.contains("href=\"#search=%3C%2Fscript%3E"), "{dom}");
    assert!(!dom.contains("href=\"javascript"), "{dom}");
    assert!(
        dom.contains("<tr class=\"check-bad\"><td><code>&lt;/script&gt;"),
        "the host checks shown, as text: {dom}"
    );
    assert!(
        dom.contains("&lt;/script&gt;&lt;script&gt;fetch("),
        "shown as text: {dom}"
    );
    std::thread::sleep(Duration::from_millis(200));
    match listener.accept() {
        Ok((mut s, _)) => {
            let mut request = String::new();
            let _ = s.read_to_string(&mut request);
            panic!("the page called out: {request}");
        }
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock),
    }
}

#[test]
fn an_interrupted_or_damaged_record_still_gets_its_page() {
    let _turn = common::group("report");
    let tmp = tempfile::tempdir().unwrap();
    let target = TargetServer::start(Behavior::default()).unwrap();
    let dir = tmp.path().join("run");
    let pid = std::process::id().to_string();
    let out = kiln(&[
        "run",
        &target.url("/"),
        "--rate",
        "100",
        "-d",
        "3s",
        "--watch-pid",
        &pid,
        "-q",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // killed mid-run: run.json still says running, the last line of each part is cut
    let run_json = dir.join("run.json");
    let manifest = std::fs::read_to_string(&run_json).unwrap();
    std::fs::write(
        &run_json,
        manifest.replace("\"status\": \"complete\"", "\"status\": \"running\""),
    )
    .unwrap();
    for part in ["load-seconds.jsonl", "resources.jsonl"] {
        let bytes = std::fs::read(dir.join(part)).unwrap();
        std::fs::write(dir.join(part), &bytes[..bytes.len() * 2 / 3]).unwrap();
    }
    // and damaged: absurd numbers in a resource line, a findings file that is not JSON
    let mut resources = std::fs::read_to_string(dir.join("resources.jsonl")).unwrap();
    resources.insert_str(
        0,
        "{\"second\":1,\"unix_ms\":18446744073709551615,\"interval_s\":1e308,\"host_cpu\":null,\
\"host_cpu_per_core\":[[0,{\"user\":1e308,\"nice\":0,\"system\":-5,\"idle\":0,\"iowait\":0,\"irq\":0,\
\"softirq\":0,\"steal\":0}]],\"host_context_switches_per_s\":null,\"run_queue\":null,\"blocked\":null,\
\"process\":null}\n",
    );
    std::fs::write(dir.join("resources.jsonl"), resources).unwrap();
    std::fs::write(dir.join("findings.json"), "{not json").unwrap();

    let out = kiln(&["report", dir.to_str().unwrap(), "--html"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = dir.join("report.html");
    let dom = dump_dom(&page);
    assert!(dom.contains("interrupted"), "{dom}");
    // the finished seconds are drawn: latency, throughput, distribution at least
    let charts = data_attr(&dom, "data-check");
    assert!(charts.len() >= 3, "{charts:?}");
    let requests: f64 = charts
        .iter()
        .find_map(|c| c["sums"]["requests/s"].as_f64())
        .unwrap();
    assert!(requests > 0.0);
}
