//! Kubernetes resource quantities, parsed once into integers.
//!
//! A quantity is `<signed decimal><suffix>` where the suffix is a binary SI
//! multiplier (`Ki`..`Ei`), a decimal SI one (`n`, `u`, `m`, ``, `k`, `M`..`E`)
//! or a decimal exponent (`e3`, `E-2`). berth needs two integer views of a
//! quantity, both rounded up as the API server's `Quantity` rounds them: the
//! value (bytes, counts) and the milli-value (milli-CPU).

use std::fmt;

/// The message the API server gives for a malformed quantity.
pub const QUANTITY_FORMAT_MESSAGE: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// Why a quantity string could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The text is not a quantity at all.
    #[error("{QUANTITY_FORMAT_MESSAGE}")]
    Format,
    /// The quantity is valid but too large to be held as a 64-bit integer.
    #[error("quantity is too large")]
    TooLarge,
}

/// A parsed quantity: `mantissa × 10^exp10 × 2^exp2`, with its sign.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    negative: bool,
    mantissa: u128,
    exp10: i32,
    exp2: u32,
}

impl Quantity {
    /// Parses a quantity as the Kubernetes API accepts it.
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let bytes = text.as_bytes();
        let mut i = 0;
        let mut negative = false;
        if let Some(&c) = bytes.first()
            && (c == b'+' || c == b'-')
        {
            negative = c == b'-';
            i = 1;
        }
        let mut mantissa: u128 = 0;
        let mut digits = 0usize;
        let mut frac_digits: i32 = 0;
        let mut seen_point = false;
        while i < bytes.len() {
            let c = bytes[i];
            if c.is_ascii_digit() {
                // Leading zeros carry no precision; anything past 36 significant
                // digits would overflow u128 arithmetic below.
                if mantissa != 0 || c != b'0' {
                    digits += 1;
                    if digits > 36 {
                        return Err(QuantityError::TooLarge);
                    }
                }
                mantissa = mantissa * 10 + u128::from(c - b'0');
                if seen_point {
                    frac_digits += 1;
                }
            } else if c == b'.' && !seen_point {
                seen_point = true;
            } else {
                break;
            }
            i += 1;
        }
        let number_len = i - usize::from(bytes.first().is_some_and(|c| *c == b'+' || *c == b'-'));
        if number_len == 0 || (seen_point && number_len == 1) {
            return Err(QuantityError::Format);
        }
        let (exp10, exp2) = parse_suffix(&text[i..])?;
        Ok(Self {
            negative,
            mantissa,
            exp10: exp10 - frac_digits,
            exp2,
        })
    }

    /// Whether the quantity is below zero.
    pub fn is_negative(&self) -> bool {
        self.negative && self.mantissa != 0
    }

    /// The value scaled by `10^scale` and rounded up (towards positive
    /// infinity), as `Quantity.ScaledValue` does.
    fn scaled(&self, scale: i32) -> Result<i64, QuantityError> {
        let mut m = self.mantissa;
        for _ in 0..self.exp2 {
            m = m.checked_mul(2).ok_or(QuantityError::TooLarge)?;
        }
        let exp = self.exp10 + scale;
        let magnitude = if exp >= 0 {
            let mut v = m;
            for _ in 0..exp {
                v = v.checked_mul(10).ok_or(QuantityError::TooLarge)?;
            }
            v
        } else {
            let div = 10u128.checked_pow(exp.unsigned_abs()).unwrap_or(u128::MAX);
            let whole = m / div;
            if !m.is_multiple_of(div) && !self.negative {
                whole + 1
            } else {
                whole
            }
        };
        let magnitude = i64::try_from(magnitude).map_err(|_| QuantityError::TooLarge)?;
        Ok(if self.negative { -magnitude } else { magnitude })
    }

    /// The value in billionths (nano units), rounded up: exact for every
    /// quantity the API accepts (which holds at most nine decimal places),
    /// and wide enough that sums and comparisons of device capacities and
    /// counters never round.
    pub fn nano_value(&self) -> Result<i128, QuantityError> {
        let mut m = self.mantissa;
        for _ in 0..self.exp2 {
            m = m.checked_mul(2).ok_or(QuantityError::TooLarge)?;
        }
        let exp = self.exp10 + 9;
        let magnitude = if exp >= 0 {
            let mut v = m;
            for _ in 0..exp {
                v = v.checked_mul(10).ok_or(QuantityError::TooLarge)?;
            }
            v
        } else {
            let div = 10u128.checked_pow(exp.unsigned_abs()).unwrap_or(u128::MAX);
            let whole = m / div;
            if !m.is_multiple_of(div) && !self.negative {
                whole + 1
            } else {
                whole
            }
        };
        let magnitude = i128::try_from(magnitude).map_err(|_| QuantityError::TooLarge)?;
        Ok(if self.negative { -magnitude } else { magnitude })
    }

    /// The value rounded up to an integer (bytes, counts).
    pub fn value(&self) -> Result<i64, QuantityError> {
        self.scaled(0)
    }

    /// The value in thousandths, rounded up (milli-CPU).
    pub fn milli_value(&self) -> Result<i64, QuantityError> {
        self.scaled(3)
    }
}

fn parse_suffix(suffix: &str) -> Result<(i32, u32), QuantityError> {
    Ok(match suffix {
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
            let rest = suffix
                .strip_prefix('e')
                .or_else(|| suffix.strip_prefix('E'))
                .ok_or(QuantityError::Format)?;
            let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(QuantityError::Format);
            }
            let exp: i32 = rest.parse().map_err(|_| QuantityError::TooLarge)?;
            if !(-100..=100).contains(&exp) {
                return Err(QuantityError::TooLarge);
            }
            (exp, 0)
        }
    })
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Used only in messages; the milli-value is exact for every quantity
        // a resource list holds.
        match self.milli_value() {
            Ok(m) if m % 1000 == 0 => write!(f, "{}", m / 1000),
            Ok(m) => write!(f, "{m}m"),
            Err(_) => write!(f, "<too large>"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn milli(s: &str) -> i64 {
        Quantity::parse(s).unwrap().milli_value().unwrap()
    }
    fn value(s: &str) -> i64 {
        Quantity::parse(s).unwrap().value().unwrap()
    }

    #[test]
    fn cpu_forms() {
        for (text, want) in [
            ("1", 1000),
            ("500m", 500),
            ("0.5", 500),
            ("2.25", 2250),
            (".1", 100),
            ("1.", 1000),
            ("100u", 1), // rounds up to one milli-CPU
            ("1n", 1),
            ("0", 0),
            ("1e3", 1_000_000),
            ("1E-3", 1),
            ("+2", 2000),
        ] {
            assert_eq!(milli(text), want, "{text}");
        }
    }

    #[test]
    fn memory_forms() {
        for (text, want) in [
            ("128974848", 128_974_848),
            ("129e6", 129_000_000),
            ("129M", 129_000_000),
            ("123Mi", 128_974_848),
            ("1Gi", 1 << 30),
            ("1.5Gi", 3 << 29),
            ("1k", 1000),
            ("1Ki", 1024),
            ("100m", 1),       // a tenth of a byte rounds up to one byte
            ("8Ei", i64::MAX), // overflows below
        ] {
            if text == "8Ei" {
                assert_eq!(
                    Quantity::parse(text).unwrap().value(),
                    Err(QuantityError::TooLarge)
                );
            } else {
                assert_eq!(value(text), want, "{text}");
            }
        }
    }

    #[test]
    fn malformed() {
        for text in [
            "", "abc", "1Qi", "1.2.3", "--1", "1e", "1e+", "m", ".", "1 Gi", "1KiB",
        ] {
            assert_eq!(
                Quantity::parse(text),
                Err(QuantityError::Format),
                "{text:?}"
            );
        }
    }

    #[test]
    fn negatives_round_towards_positive_infinity() {
        let q = Quantity::parse("-1.5").unwrap();
        assert!(q.is_negative());
        assert_eq!(q.value().unwrap(), -1);
        assert_eq!(q.milli_value().unwrap(), -1500);
    }
}
