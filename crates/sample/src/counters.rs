//! Kernel counters the sampler turns into per-interval figures: TCP listen-queue overflows
//! and retransmits (/proc/net/netstat, /proc/net/snmp), NET_RX/NET_TX softirqs per CPU
//! (/proc/softirqs), huge-page and compaction events (/proc/vmstat) and pressure stall
//! information (/proc/pressure/*). Every parser takes what it recognises and skips the rest:
//! a new kernel's extra fields or a short line never stop the sampler.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `Group: name1 name2 ...` followed by `Group: value1 value2 ...`, as /proc/net/netstat
/// and /proc/net/snmp write them, into `Group.name -> value`.
pub fn parse_paired_counters(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let mut lines = text.lines();
    while let (Some(names), Some(values)) = (lines.next(), lines.next()) {
        let (Some((group, names)), Some((group2, values))) =
            (names.split_once(':'), values.split_once(':'))
        else {
            continue;
        };
        if group != group2 {
            continue;
        }
        for (name, value) in names.split_whitespace().zip(values.split_whitespace()) {
            // Some counters (Tcp MaxConn) are signed; a negative one is not a count.
            if let Ok(v) = value.parse::<u64>() {
                out.insert(format!("{group}.{name}"), v);
            }
        }
    }
    out
}

/// /proc/softirqs: the counts per CPU of each softirq (`NET_RX: 1 2 ...`).
pub fn parse_softirqs(text: &str) -> BTreeMap<String, Vec<u64>> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let (name, counts) = line.split_once(':')?;
            let counts = counts
                .split_whitespace()
                .map(|c| c.parse().ok())
                .collect::<Option<Vec<u64>>>()?;
            Some((name.trim().to_string(), counts))
        })
        .collect()
}

/// /proc/vmstat: `name value` lines.
pub fn parse_vmstat(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(' ')?;
            Some((name.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// /proc/meminfo as `name -> kB` (lines `MemTotal:  24567890 kB`; HugePages_ counts have no
/// unit and are kept as they are).
pub fn parse_meminfo(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let value = rest.split_whitespace().next()?.parse().ok()?;
            Some((name.trim().to_string(), value))
        })
        .collect()
}

/// Interrupt counts per CPU from /proc/interrupts: all of them (device IRQs and the
/// architecture's: timer, rescheduling, TLB shootdowns ...), and the network devices' alone.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Interrupts {
    pub all_per_cpu: Vec<u64>,
    pub nic_per_cpu: Vec<u64>,
}

/// Whether an interrupt line belongs to a network device: drivers name NIC queue interrupts
/// after the interface (eth0-TxRx-0, ens5-Tx-Rx-1, mlx5_comp3) or, for virtio-net,
/// virtioN-input.Q / virtioN-output.Q.
fn is_nic_interrupt(name: &str) -> bool {
    [
        "eth", "ens", "enp", "eno", "mlx", "ixgbe", "i40e", "ena", "igb", "bnxt",
    ]
    .iter()
    .any(|p| name.starts_with(p))
        || (name.starts_with("virtio") && (name.contains("-input") || name.contains("-output")))
}

/// Parses /proc/interrupts: a header of `CPUn` columns, then a line per source with a count
/// per CPU (lines with fewer counts, like `ERR:`, add what they have).
pub fn parse_interrupts(text: &str) -> Interrupts {
    let mut lines = text.lines();
    let cpus = lines.next().map_or(0, |h| {
        h.split_whitespace()
            .filter(|w| w.starts_with("CPU"))
            .count()
    });
    let mut out = Interrupts {
        all_per_cpu: vec![0; cpus],
        nic_per_cpu: vec![0; cpus],
    };
    for line in lines {
        let mut words = line.split_whitespace();
        if words.next().is_none_or(|label| !label.ends_with(':')) {
            continue;
        }
        let nic = is_nic_interrupt(line.split_whitespace().last().unwrap_or(""));
        for (i, count) in words
            .take(cpus)
            .map_while(|w| w.parse::<u64>().ok())
            .enumerate()
        {
            out.all_per_cpu[i] = out.all_per_cpu[i].saturating_add(count);
            if nic {
                out.nic_per_cpu[i] = out.nic_per_cpu[i].saturating_add(count);
            }
        }
    }
    out
}

/// The `some` and `full` 10-second averages (percent of time) of a /proc/pressure file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Pressure {
    pub some_avg10: Option<f64>,
    pub full_avg10: Option<f64>,
}

pub fn parse_pressure(text: &str) -> Pressure {
    let avg10 = |kind: &str| {
        text.lines()
            .find(|l| l.starts_with(kind))?
            .split_whitespace()
            .find_map(|f| f.strip_prefix("avg10="))?
            .parse()
            .ok()
    };
    Pressure {
        some_avg10: avg10("some "),
        full_avg10: avg10("full "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_in_kib() {
        let m = parse_meminfo("MemTotal:       24567890 kB\nMemAvailable:   20000000 kB\nHugePages_Total:       0\nbad line\nDirty: x kB\n");
        assert_eq!(m["MemTotal"], 24_567_890);
        assert_eq!(m["MemAvailable"], 20_000_000);
        assert_eq!(m["HugePages_Total"], 0);
        assert!(!m.contains_key("Dirty"));
    }

    #[test]
    fn interrupts_per_cpu_and_the_nics_share() {
        let text = "           CPU0       CPU1       \n 24:          1          0  IO-APIC   5-edge      ACPI:Ged\n 34:        432          7 PCI-MSIX-0000:00:05.0   1-edge      virtio4-input.0\n 35:         10          1 PCI-MSIX   2-edge      virtio4-output.0\n 40:          5          5 PCI-MSI   eth0-TxRx-0\nLOC:     100000     90000   Local timer interrupts\nERR:          3\nMIS:          0\n";
        let i = parse_interrupts(text);
        assert_eq!(
            i.all_per_cpu,
            vec![1 + 432 + 10 + 5 + 100000 + 3, 7 + 1 + 5 + 90000]
        );
        assert_eq!(i.nic_per_cpu, vec![432 + 10 + 5, 7 + 1 + 5]);
        assert_eq!(parse_interrupts(""), Interrupts::default());
        assert_eq!(
            parse_interrupts("garbage\n1 2 3\nx: y z").all_per_cpu,
            Vec::<u64>::new()
        );
    }
    use proptest::prelude::*;

    #[test]
    fn netstat_pairs_become_named_counters() {
        let text = "TcpExt: SyncookiesSent ListenOverflows ListenDrops\nTcpExt: 0 17 19\n\
                    IpExt: InNoRoutes\nIpExt: 3\n";
        let c = parse_paired_counters(text);
        assert_eq!(c["TcpExt.ListenOverflows"], 17);
        assert_eq!(c["TcpExt.ListenDrops"], 19);
        assert_eq!(c["IpExt.InNoRoutes"], 3);
        let snmp = "Tcp: RtoAlgorithm MaxConn RetransSegs\nTcp: 1 -1 42\n";
        let c = parse_paired_counters(snmp);
        assert_eq!(c["Tcp.RetransSegs"], 42);
        assert!(!c.contains_key("Tcp.MaxConn"));
    }

    #[test]
    fn softirqs_vmstat_and_pressure() {
        let s = parse_softirqs("        CPU0  CPU1\n      HI: 1 2\n  NET_RX: 300 4\nBROKEN: x\n");
        assert_eq!(s["NET_RX"], [300, 4]);
        assert!(!s.contains_key("BROKEN"));
        let v = parse_vmstat("thp_fault_alloc 5\ncompact_stall 2\nodd\n");
        assert_eq!((v["thp_fault_alloc"], v["compact_stall"]), (5, 2));
        let p = parse_pressure(
            "some avg10=1.50 avg60=0.20 avg300=0.00 total=1234\nfull avg10=0.25 avg60=0 avg300=0 total=9\n",
        );
        assert_eq!((p.some_avg10, p.full_avg10), (Some(1.5), Some(0.25)));
        assert_eq!(parse_pressure(""), Pressure::default());
    }

    proptest! {
        #[test]
        fn no_input_panics(text in "\\PC{0,300}") {
            let _ = parse_paired_counters(&text);
            let _ = parse_softirqs(&text);
            let _ = parse_vmstat(&text);
            let _ = parse_pressure(&text);
            let _ = parse_interrupts(&text);
            let _ = parse_meminfo(&text);
        }
    }
}
