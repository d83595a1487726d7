//! The Prometheus process collector's families, as client_golang's serves
//! them on Linux (every Kubernetes component registers it, and dashboards
//! read a component's memory and CPU from it), with its names, types and
//! help, read from `/proc/self` when `/metrics` is scraped:
//!
//! | family | from |
//! | --- | --- |
//! | `process_cpu_seconds_total` | `stat`: utime + stime, in clock ticks of 1/100 s |
//! | `process_open_fds` | the entries of `fd/` |
//! | `process_max_fds` | `limits`: Max open files (soft) |
//! | `process_virtual_memory_bytes` | `stat`: vsize |
//! | `process_virtual_memory_max_bytes` | `limits`: Max address space (soft; unlimited is 2^64 - 1, as procfs reads it) |
//! | `process_resident_memory_bytes` | `status`: VmRSS (the resident set `stat` counts in pages, in kB) |
//! | `process_start_time_seconds` | `stat`: starttime after `/proc/stat`'s btime |
//! | `process_network_receive_bytes_total`, `process_network_transmit_bytes_total` | `net/netstat`: IpExt InOctets, OutOctets |
//!
//! Like client_golang, a value that cannot be read is left out (elsewhere
//! than on Linux, all are). Nothing is read until a scrape asks.

use crate::prom::Exposition;

/// The clock ticks per second `/proc` counts CPU time and start times in
/// (USER_HZ, 100 on every Linux architecture; procfs assumes it too).
const USER_HZ: f64 = 100.0;

/// One sample: name, type, help, value.
type Sample = (&'static str, &'static str, &'static str, f64);

/// The fields of `/proc/self/stat` after the command (which may hold
/// spaces and parentheses), numbered from 1 as proc(5) numbers them less 2:
/// index 0 is field 3 (state).
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().collect())
}

/// proc(5) field `n` (1-based) of `fields`.
fn field(fields: &[&str], n: usize) -> Option<f64> {
    fields.get(n.checked_sub(3)?)?.parse().ok()
}

/// The soft limit of `name` in `/proc/self/limits` (`unlimited`: 2^64 - 1).
fn limit(limits: &str, name: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with(name))?;
    let soft = line[name.len()..].split_whitespace().next()?;
    if soft == "unlimited" {
        return Some(u64::MAX as f64);
    }
    soft.parse().ok()
}

/// `key` of the `IpExt` section of `/proc/self/net/netstat` (a header line
/// of names, then a line of values).
fn ip_ext(netstat: &str, key: &str) -> Option<f64> {
    let mut lines = netstat.lines().filter(|l| l.starts_with("IpExt:"));
    let names = lines.next()?;
    let values = lines.next()?;
    let i = names.split_whitespace().position(|n| n == key)?;
    values.split_whitespace().nth(i)?.parse().ok()
}

/// The samples of what `/proc` says (each input `None` when it could not
/// be read).
fn samples(
    stat: Option<&str>,
    status: Option<&str>,
    limits: Option<&str>,
    boot_stat: Option<&str>,
    netstat: Option<&str>,
    open_fds: Option<usize>,
) -> Vec<Sample> {
    let mut out = Vec::new();
    let fields = stat.and_then(stat_fields);
    if let Some(f) = &fields
        && let (Some(utime), Some(stime)) = (field(f, 14), field(f, 15))
    {
        out.push((
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            (utime + stime) / USER_HZ,
        ));
    }
    if let Some(n) = open_fds {
        out.push((
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
            n as f64,
        ));
    }
    if let Some(max) = limits.and_then(|l| limit(l, "Max open files")) {
        out.push((
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
            max,
        ));
    }
    if let Some(vsize) = fields.as_deref().and_then(|f| field(f, 23)) {
        out.push((
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size in bytes.",
            vsize,
        ));
    }
    if let Some(max) = limits.and_then(|l| limit(l, "Max address space")) {
        out.push((
            "process_virtual_memory_max_bytes",
            "gauge",
            "Maximum amount of virtual memory available in bytes.",
            max,
        ));
    }
    let rss_kb = status.and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
    });
    if let Some(kb) = rss_kb {
        out.push((
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
            kb * 1024.0,
        ));
    }
    let boot = boot_stat.and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<f64>().ok())
    });
    if let (Some(f), Some(boot)) = (&fields, boot)
        && let Some(start) = field(f, 22)
    {
        out.push((
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since unix epoch in seconds.",
            boot + start / USER_HZ,
        ));
    }
    if let Some(n) = netstat {
        if let Some(v) = ip_ext(n, "InOctets") {
            out.push((
                "process_network_receive_bytes_total",
                "counter",
                "Number of bytes received by the process over the network.",
                v,
            ));
        }
        if let Some(v) = ip_ext(n, "OutOctets") {
            out.push((
                "process_network_transmit_bytes_total",
                "counter",
                "Number of bytes sent by the process over the network.",
                v,
            ));
        }
    }
    out.sort_by_key(|s| s.0);
    out
}

/// Writes the families of this process, read now.
pub fn render(e: &mut Exposition) {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let fds = std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count());
    let stat = read("/proc/self/stat");
    let status = read("/proc/self/status");
    let limits = read("/proc/self/limits");
    let boot = read("/proc/stat");
    let netstat = read("/proc/self/net/netstat");
    for (name, kind, help, v) in samples(
        stat.as_deref(),
        status.as_deref(),
        limits.as_deref(),
        boot.as_deref(),
        netstat.as_deref(),
        fds,
    ) {
        e.family(name, kind, help);
        e.sample_f64(name, &[], v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `/proc/self/stat` of a process named with a space and a `)`.
    const STAT: &str = "4242 (berth d) x) S 1 4242 4242 0 -1 4194560 1523 0 0 0 250 37 0 0 20 0 9 0 123456 1073741824 4000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";

    #[test]
    fn proc_files_read_as_the_process_collector_reads_them() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \nMax open files            1048576              1048576              files     \nMax address space         unlimited            unlimited            bytes     \n";
        let status = "Name:\tberthd\nVmRSS:\t   45312 kB\n";
        let boot = "cpu  1 2 3\nbtime 1700000000\n";
        let netstat = "TcpExt: A B\nTcpExt: 1 2\nIpExt: InNoRoutes InOctets OutOctets\nIpExt: 0 12345 67890\n";
        let got: Vec<(&str, f64)> = samples(
            Some(STAT),
            Some(status),
            Some(limits),
            Some(boot),
            Some(netstat),
            Some(12),
        )
        .into_iter()
        .map(|(n, _, _, v)| (n, v))
        .collect();
        assert_eq!(
            got,
            [
                ("process_cpu_seconds_total", 2.87),
                ("process_max_fds", 1048576.0),
                ("process_network_receive_bytes_total", 12345.0),
                ("process_network_transmit_bytes_total", 67890.0),
                ("process_open_fds", 12.0),
                ("process_resident_memory_bytes", 45312.0 * 1024.0),
                ("process_start_time_seconds", 1700000000.0 + 1234.56),
                ("process_virtual_memory_bytes", 1073741824.0),
                ("process_virtual_memory_max_bytes", u64::MAX as f64),
            ]
        );
        // What cannot be read is left out.
        assert!(samples(None, None, None, None, None, None).is_empty());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_has_every_family() {
        let mut e = Exposition::new();
        render(&mut e);
        let text = e.finish();
        for name in [
            "process_cpu_seconds_total",
            "process_open_fds",
            "process_max_fds",
            "process_virtual_memory_bytes",
            "process_virtual_memory_max_bytes",
            "process_resident_memory_bytes",
            "process_start_time_seconds",
        ] {
            assert!(text.contains(&format!("\n{name} ")), "{name} in {text}");
        }
    }
}
