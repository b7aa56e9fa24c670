//! The query report as one self-contained HTML file: findings, routes and the DB stack
//! trie as a zoomable treemap. No network is needed to open it.
//!
//! Everything that came from the outside (SQL, routes, frames) is either HTML-escaped here
//! or carried as JSON data (with `<`, `>`, `&` and the JavaScript line separators escaped,
//! so it cannot end the script element) that the page's script puts into the DOM with
//! `textContent` only. The page never builds HTML from data.

use std::fmt::Write as _;

use crate::analyze::{Analysis, RouteSummary, Severity};
use crate::trie::StackTrie;

pub use kiln_record::text::{html_escape as escape, script_json};

const STYLE: &str = r#"
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#fafafa}
header{padding:12px 20px;background:#1d2330;color:#fff}
header h1{font-size:18px;margin:0}
section{padding:8px 20px}
h2{font-size:16px;margin:16px 0 8px}
table{border-collapse:collapse;background:#fff}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}
code,pre{font:12px/1.35 ui-monospace,monospace;white-space:pre-wrap;word-break:break-word}
.sev-high{color:#b00020;font-weight:bold}.sev-medium{color:#b35c00;font-weight:bold}.sev-low{color:#555}
.muted{color:#666}
"#;

/// Squarified treemap (Bruls, Huizing, van Wijk) over the trie's nested arrays
/// `[name, calls, time_us, children]`; click zooms in, the breadcrumb zooms out.
/// The treemap's style (its ids and classes), for any page that shows it.
pub const TREEMAP_STYLE: &str = r#"
#crumbs{margin:6px 0;font-size:13px}
#crumbs a{cursor:pointer;color:#0b57d0;text-decoration:underline}
#map{position:relative;height:560px;background:#fff;border:1px solid #ccc;overflow:hidden}
.cell{position:absolute;box-sizing:border-box;border:1px solid #fff;overflow:hidden;font-size:11px;
  padding:2px 3px;cursor:pointer;color:#111}
.cell:hover{outline:2px solid #1d2330;z-index:2}
#tip{position:fixed;pointer-events:none;background:#1d2330;color:#fff;padding:6px 8px;font-size:12px;
  max-width:560px;display:none;z-index:9;white-space:pre-wrap}
"#;

/// The treemap's script: reads `#trie-data` and draws into `#map`, with text only.
pub const TREEMAP_SCRIPT: &str = r#"
(function(){
var data=JSON.parse(document.getElementById('trie-data').textContent);
var map=document.getElementById('map'),crumbs=document.getElementById('crumbs'),tip=document.getElementById('tip');
var weightBy=1,path=[data];
function w(n){return n[weightBy]}
function fmt(n){return n[1]+' calls, '+(n[2]/1000).toFixed(1)+' ms'}
function color(name,depth){var h=0;for(var i=0;i<name.length;i++)h=(h*31+name.charCodeAt(i))%360;
  return name.indexOf('SQL ')===0?'hsl(8,70%,'+(78-depth*2)+'%)':'hsl('+(30+h%60)+',65%,'+(82-depth*3)+'%)'}
function worst(row,side,sum){var mx=0,mn=Infinity;row.forEach(function(r){mx=Math.max(mx,r.a);mn=Math.min(mn,r.a)});
  var s2=side*side,S2=sum*sum;return Math.max(s2*mx/S2,S2/(s2*mn))}
function layout(items,x,y,W,H,out){
  items=items.filter(function(it){return it.a>0});
  while(items.length){var side=Math.min(W,H),row=[],sum=0;
    while(items.length){var next=items[0],t=row.concat([next]),ts=sum+next.a;
      if(row.length&&worst(t,side,ts)>worst(row,side,sum))break;row=t;sum=ts;items.shift()}
    var thick=sum/side,off=0;
    row.forEach(function(r){var len=r.a/thick;
      if(W>=H)out.push({n:r.n,x:x,y:y+off,w:thick,h:len});else out.push({n:r.n,x:x+off,y:y,w:len,h:thick});off+=len});
    if(W>=H){x+=thick;W-=thick}else{y+=thick;H-=thick}}
  return out}
function draw(){
  var node=path[path.length-1];map.textContent='';crumbs.textContent='';
  path.forEach(function(p,i){var a=document.createElement('a');a.textContent=i?p[0]:'all';
    a.onclick=function(){path=path.slice(0,i+1);draw()};crumbs.appendChild(a);
    if(i<path.length-1)crumbs.appendChild(document.createTextNode(' › '))});
  var W=map.clientWidth,H=map.clientHeight,total=w(node)||1;
  function place(n,x,y,ww,hh,depth,parentPath){
    var kids=n[3]||[];
    if(!kids.length||ww<30||hh<18||depth>2){return [{n:n,x:x,y:y,w:ww,h:hh,d:depth,p:parentPath}]}
    var head=14,items=kids.map(function(k){return {n:k,a:w(k)/w(n)*ww*(hh-head)}});
    var cells=layout(items,x,y+head,ww,hh-head,[]),out=[{n:n,x:x,y:y,w:ww,h:head,d:depth,p:parentPath,label:true}];
    cells.forEach(function(c){out=out.concat(place(c.n,c.x,c.y,c.w,c.h,depth+1,parentPath.concat([c.n])))});
    return out}
  var kids=(node[3]||[]).map(function(k){return {n:k,a:w(k)/total*W*H}});
  var cells=[];layout(kids,0,0,W,H,[]).forEach(function(c){cells=cells.concat(place(c.n,c.x,c.y,c.w,c.h,0,[c.n]))});
  cells.forEach(function(c){var d=document.createElement('div');d.className='cell';
    d.style.left=c.x+'px';d.style.top=c.y+'px';d.style.width=Math.max(c.w,1)+'px';d.style.height=Math.max(c.h,1)+'px';
    d.style.background=color(c.n[0],c.d);d.textContent=c.n[0];
    d.onmousemove=function(e){tip.style.display='block';tip.style.left=(e.clientX+12)+'px';tip.style.top=(e.clientY+12)+'px';
      tip.textContent=c.n[0]+'\n'+fmt(c.n)+' ('+(100*w(c.n)/(w(data)||1)).toFixed(1)+'% of all)'};
    d.onmouseleave=function(){tip.style.display='none'};
    d.onclick=function(){if((c.n[3]||[]).length){path=path.concat(c.p);draw()}};
    map.appendChild(d)});
  document.getElementById('map-total').textContent=fmt(node);
}
document.getElementById('by-calls').onclick=function(){weightBy=1;draw()};
document.getElementById('by-time').onclick=function(){weightBy=2;draw()};
window.addEventListener('resize',draw);draw();
})();
"#;

/// The DB stack trie's treemap: its heading, controls, box and data (the script draws it).
pub fn treemap(trie: &StackTrie) -> String {
    let tree = serde_json::to_string(&trie.tree()).unwrap_or_else(|_| "[\"all\",0,0,[]]".into());
    format!(
        "<h2>DB stack trie</h2><p class=\"muted\">Each box is a route, a frame of the calling code or a statement, \
         sized by the DB calls below it. Click to zoom in; the path above zooms out. \
         Weight: <button id=\"by-calls\">calls</button> <button id=\"by-time\">DB time</button> \
         (<span id=\"map-total\"></span>)</p><div id=\"crumbs\"></div><div id=\"map\"></div><div id=\"tip\"></div>\
         <script type=\"application/json\" id=\"trie-data\">{}</script>",
        script_json(&tree)
    )
}

/// The routes' table: DB calls and DB time per request, and the most frequent statements.
pub fn routes_table(routes: &[RouteSummary]) -> String {
    let mut out = String::from(
        "<table><tr><th>route</th><th class=\"n\">requests</th><th class=\"n\">DB calls per request p50</th>\
         <th class=\"n\">p95</th><th class=\"n\">max</th><th class=\"n\">DB ms p50</th><th class=\"n\">p95</th>\
         <th>most frequent statements</th></tr>",
    );
    for r in routes {
        let top: Vec<String> = r
            .top_queries
            .iter()
            .map(|q| format!("{}× {}", q.calls, escape(&q.shape)))
            .collect();
        let _ = write!(
            out,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{:.1}</td><td class=\"n\">{:.1}</td><td><pre>{}</pre></td></tr>",
            escape(&r.route),
            r.requests,
            r.calls_median,
            r.calls_p95,
            r.calls_max,
            r.db_time_median_ms,
            r.db_time_p95_ms,
            top.join("\n")
        );
    }
    out + "</table>"
}

fn severity_class(severity: Severity) -> &'static str {
    match severity {
        Severity::High => "sev-high",
        Severity::Medium => "sev-medium",
        Severity::Low => "sev-low",
    }
}

/// The whole report page.
pub fn render(analysis: &Analysis, trie: &StackTrie, title: &str) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let c = &analysis.summary.coverage;
    let _ = write!(
        out,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{t}</title><style>{STYLE}{TREEMAP_STYLE}</style></head><body>\
         <header><h1>{t}</h1><div class=\"muted\">kiln queries</div></header><section>\
         <p>{} spans read: {} DB calls, {} with query text, {} with a stack or caller frame, {} rejected. \
         {} requests in {} routes.</p>",
        c.spans,
        c.db_spans,
        c.db_with_text,
        c.db_with_caller,
        c.rejected_spans + c.rejected_lines,
        analysis.summary.requests_matched,
        analysis.summary.routes.len(),
        t = escape(title)
    );
    out.push_str("<h2>Findings</h2>");
    if analysis.summary.findings.is_empty() {
        out.push_str("<p>None.</p>");
    } else {
        out.push_str(
            "<table><tr><th>severity</th><th>what</th><th>route</th><th>requests</th><th>calls (max)</th>\
             <th>statement and call site</th><th>fix</th><th>id</th></tr>",
        );
        for f in &analysis.summary.findings {
            let e = &f.example;
            let site: Vec<String> = e.site.iter().map(|f| escape(&f.label())).collect();
            let _ = write!(
                out,
                "<tr><td class=\"{}\">{:?}</td><td>{}<br><span class=\"muted\">{}</span></td><td>{}</td>\
                 <td class=\"n\">{}</td><td class=\"n\">{}</td><td><code>{}</code><pre>{}</pre></td><td>{}</td><td><code>{}</code></td></tr>",
                severity_class(e.severity),
                e.severity,
                escape(e.kind.title()),
                escape(&e.evidence),
                escape(&e.route),
                f.requests,
                f.calls_max,
                escape(&e.shape),
                if site.is_empty() { "call site unknown".into() } else { site.join("\n") },
                escape(&e.fix),
                escape(&e.id),
            );
        }
        out.push_str("</table>");
    }
    out.push_str("<h2>Routes</h2>");
    out.push_str(&routes_table(&analysis.summary.routes));
    out.push_str(&treemap(trie));
    let _ = write!(
        out,
        "</section><script>{TREEMAP_SCRIPT}</script></body></html>"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_keeps_markup_as_text() {
        assert_eq!(
            escape("<script>alert('x')</script>&\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"
        );
        let json = script_json(r#"["</script><script>alert(1)</script>"]"#);
        assert!(!json.contains("</script>"));
        let back: Vec<String> = serde_json::from_str(&json).unwrap();
        assert_eq!(back[0], "</script><script>alert(1)</script>");
    }
}
