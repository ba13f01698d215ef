//! What machine a figure was measured on: the simulator's speed and every benchmark depend
//! on it as much as on the code (the same simulated run, trace for trace, took 42-48 s on
//! one VM's AMD EPYC and 85-102 s on another's Intel Xeon), so each report names it.

use serde_json::json;

/// The CPU model, from `/proc/cpuinfo` ("unknown" where it cannot be read).
pub(crate) fn cpu() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|r| r.split(':').nth(1))
        })
        .map_or_else(|| "unknown".to_string(), |model| model.trim().to_string())
}

/// Cores this process may run on.
pub(crate) fn cores() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}

/// CPU, cores, kernel and load average, for a report.
pub(crate) fn describe() -> serde_json::Value {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    json!({"cpu": cpu(), "cores": cores(), "kernel": kernel.trim(), "loadavg": load.trim()})
}
