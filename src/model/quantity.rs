//! Kubernetes resource quantities (`"500m"`, `"16Gi"`, `"1e3"`): parsing into integers and
//! formatting back into canonical strings.

use std::fmt;

/// Why a quantity string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct ParseError {
    reason: &'static str,
}

const fn err(reason: &'static str) -> ParseError {
    ParseError { reason }
}

/// A non-negative quantity held in thousandths of its unit, rounded up as Kubernetes does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Quantity {
    milli: u128,
}

impl Quantity {
    /// A quantity of `units` whole units.
    pub const fn from_units(units: u64) -> Self {
        Self {
            milli: units as u128 * 1000,
        }
    }

    /// A quantity of `milli` thousandths of a unit.
    pub const fn from_milli(milli: u64) -> Self {
        Self {
            milli: milli as u128,
        }
    }

    /// The value in thousandths of a unit, saturating at `u64::MAX`.
    pub fn milli(self) -> u64 {
        u64::try_from(self.milli).unwrap_or(u64::MAX)
    }

    /// The value in whole units, rounded up, saturating at `u64::MAX`.
    pub fn units_ceil(self) -> u64 {
        u64::try_from(self.milli.div_ceil(1000)).unwrap_or(u64::MAX)
    }

    /// Whether the value is a whole number of units.
    pub fn is_whole(self) -> bool {
        self.milli.is_multiple_of(1000)
    }

    /// Parses a Kubernetes quantity string.
    ///
    /// # Errors
    /// Returns [`ParseError`] for empty, negative, malformed or out-of-range input.
    pub fn parse(input: &str) -> Result<Self, ParseError> {
        let s = input.trim();
        if s.is_empty() {
            return Err(err("empty quantity"));
        }
        let s = s.strip_prefix('+').unwrap_or(s);
        if s.starts_with('-') {
            return Err(err("quantity must not be negative"));
        }
        let number_end = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let (number, suffix) = s.split_at(number_end);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(err("quantity must start with a number"));
        }
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        // mantissa * 10^-frac_digits is the number.
        let digits = format!("{int_part}{frac_part}");
        let mantissa: u128 = digits
            .parse()
            .map_err(|_| err("quantity number is too large"))?;
        let frac_digits = i32::try_from(frac_part.len()).map_err(|_| err("too many digits"))?;
        let (mul, exp10): (u128, i32) = match suffix {
            "" => (1, 0),
            "Ki" => (1 << 10, 0),
            "Mi" => (1 << 20, 0),
            "Gi" => (1 << 30, 0),
            "Ti" => (1 << 40, 0),
            "Pi" => (1 << 50, 0),
            "Ei" => (1 << 60, 0),
            "n" => (1, -9),
            "u" => (1, -6),
            "m" => (1, -3),
            "k" => (1, 3),
            "M" => (1, 6),
            "G" => (1, 9),
            "T" => (1, 12),
            "P" => (1, 15),
            "E" => (1, 18),
            other => {
                let exp = other
                    .strip_prefix('e')
                    .or_else(|| other.strip_prefix('E'))
                    .ok_or(err("unknown quantity suffix"))?;
                let exp: i32 = exp.parse().map_err(|_| err("malformed exponent"))?;
                (1, exp)
            }
        };
        // milli = mantissa * mul * 10^(exp10 - frac_digits + 3), rounded up.
        let scale = exp10 - frac_digits + 3;
        let base = mantissa
            .checked_mul(mul)
            .ok_or(err("quantity is out of range"))?;
        let milli = if scale >= 0 {
            let factor = 10u128
                .checked_pow(u32::try_from(scale).map_err(|_| err("quantity is out of range"))?)
                .ok_or(err("quantity is out of range"))?;
            base.checked_mul(factor)
                .ok_or(err("quantity is out of range"))?
        } else {
            let divisor = 10u128
                .checked_pow(scale.unsigned_abs())
                .ok_or(err("quantity is out of range"))?;
            base.div_ceil(divisor)
        };
        if milli > u128::from(u64::MAX) * 1000 {
            return Err(err("quantity is out of range"));
        }
        Ok(Self { milli })
    }

    /// Canonical string for a CPU-like quantity: whole units, else millis (`"2"`, `"500m"`).
    pub fn to_decimal_string(self) -> String {
        if self.is_whole() {
            (self.milli / 1000).to_string()
        } else {
            format!("{}m", self.milli)
        }
    }

    /// Canonical string for a byte-like quantity: the largest exact binary suffix (`"16Gi"`).
    pub fn to_binary_string(self) -> String {
        if !self.is_whole() {
            return self.to_decimal_string();
        }
        let bytes = self.milli / 1000;
        for (suffix, shift) in [
            ("Ei", 60),
            ("Pi", 50),
            ("Ti", 40),
            ("Gi", 30),
            ("Mi", 20),
            ("Ki", 10),
        ] {
            let unit = 1u128 << shift;
            if bytes >= unit && bytes.is_multiple_of(unit) {
                return format!("{}{suffix}", bytes / unit);
            }
        }
        bytes.to_string()
    }

    /// `self - other`, or `None` if `other` is larger.
    pub fn checked_sub(self, other: Self) -> Option<Self> {
        self.milli
            .checked_sub(other.milli)
            .map(|milli| Self { milli })
    }
}

impl serde::Serialize for Quantity {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_binary_string())
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_decimal_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn parses_plain_milli_binary_and_decimal_forms() {
        assert_eq!(q("4").milli(), 4000);
        assert_eq!(q("500m").milli(), 500);
        assert_eq!(q("1.5").milli(), 1500);
        assert_eq!(q("16Gi").units_ceil(), 16 << 30);
        assert_eq!(q("1k").units_ceil(), 1000);
        assert_eq!(q("1e3").units_ceil(), 1000);
        assert_eq!(q("2E2").units_ceil(), 200);
        assert_eq!(q("1.5Gi").units_ceil(), 3 << 29);
        assert_eq!(q("+3").units_ceil(), 3);
    }

    #[test]
    fn rounds_sub_milli_values_up() {
        assert_eq!(q("1n").milli(), 1);
        assert_eq!(q("1500u").milli(), 2);
    }

    #[test]
    fn rejects_malformed_negative_and_unknown_suffixes() {
        for bad in [
            "",
            "-1",
            "abc",
            "1.2.3",
            "12Qi",
            "1e",
            ".",
            "Gi",
            "1e99999999999",
        ] {
            assert!(Quantity::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn formats_canonically_and_round_trips() {
        assert_eq!(q("2048Gi").to_binary_string(), "2Ti");
        assert_eq!(q("81559Mi").to_binary_string(), "81559Mi");
        assert_eq!(q("1000").to_binary_string(), "1000");
        assert_eq!(q("0.5").to_decimal_string(), "500m");
        assert_eq!(q("192").to_decimal_string(), "192");
        for s in ["7600Gi", "24Gi", "3"] {
            assert_eq!(q(&q(s).to_binary_string()), q(s));
        }
    }
}
