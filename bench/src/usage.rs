//! What a process used: this process's CPU time and memory, and another
//! process's CPU time, as the workloads measure them.

/// Memory figures of this process from /proc/self/status, in MiB:
/// (VmRSS, VmHWM). Zero where unavailable.
pub fn memory_mib() -> (f64, f64) {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU time this process (every thread, the ones that ended included) has
/// used so far, in seconds, from the process's CPU clock (nanoseconds; the
/// 10 ms ticks of /proc/self/stat were a tenth of what a 500-node workload
/// spends).
pub fn cpu_seconds() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// CPU time of the process whose `stat` file is `stat` (e.g.
/// `/proc/<pid>/stat`): utime + stime, in clock ticks of 1/100 s on Linux;
/// zero where unavailable.
pub fn cpu_seconds_from(stat: &str) -> f64 {
    let text = std::fs::read_to_string(stat).unwrap_or_default();
    // Fields after the command name (which is in parentheses and may hold
    // spaces): state is field 3, utime 14, stime 15.
    let rest = text.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}
