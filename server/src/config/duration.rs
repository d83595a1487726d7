//! Go-style durations (`15s`, `1m30s`, `250ms`), as `metav1.Duration`
//! fields are written in Kubernetes configuration.

use std::time::Duration;

/// Parses a Go duration string. Negative durations are refused.
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let err = || format!("invalid duration {text:?}");
    let s = text.strip_prefix('+').unwrap_or(text);
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() || s.starts_with('-') {
        return Err(err());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        if num_len == 0 {
            return Err(err());
        }
        let value: f64 = rest[..num_len].parse().map_err(|_| err())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(err()),
        };
        total += value * nanos;
        rest = &rest[unit_len..];
    }
    if !total.is_finite() || total > u64::MAX as f64 {
        return Err(err());
    }
    Ok(Duration::from_nanos(total as u64))
}

/// Formats a duration as Go's `time.Duration.String()` does (`10s`,
/// `1m30s`, `15m0s`, `1.5s`, `250ms`), for messages worded as upstream's.
pub fn go_duration(d: Duration) -> String {
    let total_ns = d.as_nanos();
    if total_ns == 0 {
        return "0s".into();
    }
    if total_ns < 1_000_000_000 {
        let (unit, div) = if total_ns < 1_000 {
            ("ns", 1)
        } else if total_ns < 1_000_000 {
            ("µs", 1_000)
        } else {
            ("ms", 1_000_000)
        };
        return format!("{}{unit}", trim_fraction(total_ns, div));
    }
    let hours = total_ns / 3_600_000_000_000;
    let minutes = (total_ns / 60_000_000_000) % 60;
    let seconds_ns = total_ns % 60_000_000_000;
    let seconds = trim_fraction(seconds_ns, 1_000_000_000);
    if hours > 0 {
        format!("{hours}h{minutes}m{seconds}s")
    } else if minutes > 0 {
        format!("{minutes}m{seconds}s")
    } else {
        format!("{seconds}s")
    }
}

fn trim_fraction(value: u128, div: u128) -> String {
    let whole = value / div;
    let frac = value % div;
    if frac == 0 {
        return whole.to_string();
    }
    let width = div.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert_eq!(parse_go_duration("15s").unwrap(), Duration::from_secs(15));
        assert_eq!(parse_go_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(
            parse_go_duration("250ms").unwrap(),
            Duration::from_millis(250)
        );
        assert_eq!(
            parse_go_duration("1.5h").unwrap(),
            Duration::from_secs(5400)
        );
        assert_eq!(parse_go_duration("0").unwrap(), Duration::ZERO);
        for bad in ["", "15", "s", "-1s", "1x", "1s2"] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
    }
}
