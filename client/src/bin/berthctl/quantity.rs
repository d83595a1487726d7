//! Kubernetes resource quantities ("500m", "1.5", "16Gi", "1e3"), enough of
//! them for berthctl to add up pod requests and print them back.
//!
//! A quantity is held exactly as a count of billionths of its unit, so
//! "100m" CPU and "1Gi" of memory are both integers; finer precision is
//! rounded up, as the API server rounds it.

/// Why a quantity string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Not `<number><suffix>`.
    #[error("invalid quantity {0:?}")]
    Invalid(String),
    /// A valid quantity too large to count.
    #[error("quantity {0:?} is too large")]
    TooLarge(String),
}

/// A parsed quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Quantity {
    nanos: i128,
}

const NANOS_PER_UNIT: i128 = 1_000_000_000;

/// `a / b` rounded towards positive infinity (`b > 0`).
fn ceil_div(a: i128, b: i128) -> i128 {
    a.div_euclid(b) + i128::from(a.rem_euclid(b) != 0)
}

/// The decimal exponent and power of two a suffix stands for.
fn suffix(s: &str) -> Option<(i32, u32)> {
    Some(match s {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        _ => {
            // Scientific notation: e3, E-2, e+6.
            let rest = s.strip_prefix(['e', 'E'])?;
            let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            (rest.parse::<i32>().ok()?, 0)
        }
    })
}

impl Quantity {
    /// Parses a quantity as Kubernetes writes them.
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let invalid = || QuantityError::Invalid(text.to_string());
        let too_large = || QuantityError::TooLarge(text.to_string());
        let (negative, body) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        let number_len = body
            .bytes()
            .take_while(|b| b.is_ascii_digit() || *b == b'.')
            .count();
        let (number, rest) = body.split_at(number_len);
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && frac.is_empty()) || frac.contains('.') {
            return Err(invalid());
        }
        let (exp10, exp2) = suffix(rest).ok_or_else(invalid)?;
        let mut mantissa: i128 = 0;
        for b in whole.bytes().chain(frac.bytes()) {
            mantissa = mantissa
                .checked_mul(10)
                .and_then(|m| m.checked_add(i128::from(b - b'0')))
                .ok_or_else(too_large)?;
        }
        if negative {
            mantissa = -mantissa;
        }
        let mut value = mantissa
            .checked_mul(1i128.checked_shl(exp2).ok_or_else(too_large)?)
            .ok_or_else(too_large)?;
        let frac_digits = i32::try_from(frac.len()).map_err(|_| too_large())?;
        let exp = exp10
            .checked_sub(frac_digits)
            .and_then(|e| e.checked_add(9))
            .ok_or_else(too_large)?;
        if exp >= 0 {
            let scale = 10i128
                .checked_pow(exp.unsigned_abs())
                .ok_or_else(too_large)?;
            value = value.checked_mul(scale).ok_or_else(too_large)?;
        } else {
            value = match 10i128.checked_pow(exp.unsigned_abs()) {
                Some(div) => ceil_div(value, div),
                // Smaller than a billionth of a unit: rounds up to one, or
                // to zero for a negative amount.
                None => i128::from(value > 0),
            };
        }
        Ok(Self { nanos: value })
    }

    /// Thousandths of the unit, rounded up (milli-CPU).
    pub fn milli(&self) -> i64 {
        saturate(ceil_div(self.nanos, NANOS_PER_UNIT / 1000))
    }

    /// Whole units, rounded up (bytes, counts).
    pub fn value(&self) -> i64 {
        saturate(ceil_div(self.nanos, NANOS_PER_UNIT))
    }
}

fn saturate(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

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

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn cpu_forms_in_millicores() {
        for (text, milli) in [
            ("1", 1000),
            ("500m", 500),
            ("0.5", 500),
            (".5", 500),
            ("1.5", 1500),
            ("2.", 2000),
            ("+250m", 250),
            ("100u", 1),
            ("1n", 1),
            ("0", 0),
            ("1e3", 1_000_000),
            ("1E-3", 1),
            ("5e+1", 50_000),
            ("1k", 1_000_000),
            ("-500m", -500),
            ("-0.0001", 0),
        ] {
            assert_eq!(q(text).milli(), milli, "{text}");
        }
    }

    #[test]
    fn memory_forms_in_bytes() {
        for (text, bytes) in [
            ("128974848", 128_974_848),
            ("129e6", 129_000_000),
            ("129M", 129_000_000),
            ("123Mi", 128_974_848),
            ("1Ki", 1024),
            ("1.5Gi", 1_610_612_736),
            ("16Gi", 17_179_869_184),
            ("2Ti", 2_199_023_255_552),
            ("1Ei", 1_152_921_504_606_846_976),
            ("1G", 1_000_000_000),
            ("0.1", 1),
            ("1m", 1),
            ("7E", 7_000_000_000_000_000_000),
        ] {
            assert_eq!(q(text).value(), bytes, "{text}");
        }
        assert_eq!(q("16E").value(), i64::MAX, "saturates");
    }

    #[test]
    fn malformed_quantities_are_refused() {
        for text in [
            "", "m", "1.2.3", "lots", "1 Gi", "1gi", "1KiB", "1e", "1e+", "--1", "1.5x", ".", "+",
        ] {
            assert_eq!(
                Quantity::parse(text),
                Err(QuantityError::Invalid(text.into())),
                "{text:?}"
            );
        }
        assert_eq!(
            Quantity::parse("1e99"),
            Err(QuantityError::TooLarge("1e99".into()))
        );
        assert_eq!(
            Quantity::parse("99999999999999999999999999999999999999999"),
            Err(QuantityError::TooLarge(
                "99999999999999999999999999999999999999999".into()
            ))
        );
        assert_eq!(q("1e-99").milli(), 1, "a tiny positive amount rounds up");
    }

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
