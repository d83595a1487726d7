//! Resource amounts as berthctl prints them: CPU in cores, memory with
//! binary suffixes, shares in per cent. (Quantities are parsed and summed
//! by berthd: node tables come from its ListNodeUsage.)

/// CPU as cores: 4, 1.5, 0.25, 0.001.
pub fn format_cpu(milli: i64) -> String {
    let sign = if milli < 0 { "-" } else { "" };
    let m = milli.unsigned_abs();
    if m.is_multiple_of(1000) {
        format!("{sign}{}", m / 1000)
    } else {
        let frac = format!("{:03}", m % 1000);
        format!("{sign}{}.{}", m / 1000, frac.trim_end_matches('0'))
    }
}

/// Bytes in the largest binary unit that fits: 16Gi, 6.5Gi, 512Mi, 100.
pub fn format_bytes(bytes: i64) -> String {
    const UNITS: [(&str, u32); 6] = [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ];
    let sign = if bytes < 0 { "-" } else { "" };
    let b = bytes.unsigned_abs();
    for (unit, shift) in UNITS {
        let size = 1u64 << shift;
        if b >= size {
            return if b.is_multiple_of(size) {
                format!("{sign}{}{unit}", b / size)
            } else {
                let v = format!("{:.1}", b as f64 / size as f64);
                format!("{sign}{}{unit}", v.trim_end_matches(".0"))
            };
        }
    }
    format!("{sign}{b}")
}

/// `part` as a whole percentage of `whole` ("-" when `whole` is not positive).
pub fn percent(part: i64, whole: i64) -> String {
    if whole <= 0 {
        return "-".into();
    }
    format!("{}%", i128::from(part) * 100 / i128::from(whole))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatting() {
        assert_eq!(format_cpu(4000), "4");
        assert_eq!(format_cpu(1500), "1.5");
        assert_eq!(format_cpu(250), "0.25");
        assert_eq!(format_cpu(1), "0.001");
        assert_eq!(format_cpu(-500), "-0.5");
        assert_eq!(format_bytes(17_179_869_184), "16Gi");
        assert_eq!(format_bytes(6_979_321_856), "6.5Gi");
        assert_eq!(format_bytes(536_870_912), "512Mi");
        assert_eq!(format_bytes(1_000_000_000), "953.7Mi");
        assert_eq!(format_bytes(100), "100");
        assert_eq!(format_bytes(0), "0");
        assert_eq!(percent(1500, 4000), "37%");
        assert_eq!(percent(1, 0), "-");
    }
}
