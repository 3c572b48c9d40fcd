//! Durations written with a unit (`"500ms"`, `"2s"`).
//!
//! A bare number is rejected with a message that says which unit to add: Resilience4j's
//! `limitRefreshPeriod: 500` meant 500 nanoseconds, a trap that is easy to fall into.

use std::fmt;
use std::str::FromStr;

/// A non-negative span of time written in config as a number followed by a unit:
/// `ns`, `us`, `ms`, `s`, `m` or `h` (`"250ms"`, `"1.5s"`, `"2m"`).
///
/// ```
/// use bulkhead::config::Duration;
/// let d: Duration = "1.5s".parse().unwrap();
/// assert_eq!(d.as_std(), std::time::Duration::from_millis(1500));
/// assert_eq!(d.to_string(), "1500ms");
/// assert!("500".parse::<Duration>().unwrap_err().to_string().contains("500ms"));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(std::time::Duration);

impl Duration {
    /// Zero: for a wait, "do not wait at all".
    pub const ZERO: Duration = Duration(std::time::Duration::ZERO);

    /// Wraps a [`std::time::Duration`].
    pub const fn from_std(d: std::time::Duration) -> Self {
        Duration(d)
    }

    /// A duration of `ms` milliseconds.
    pub const fn from_millis(ms: u64) -> Self {
        Duration(std::time::Duration::from_millis(ms))
    }

    /// A duration of `s` seconds.
    pub const fn from_secs(s: u64) -> Self {
        Duration(std::time::Duration::from_secs(s))
    }

    /// The [`std::time::Duration`] it holds.
    pub const fn as_std(self) -> std::time::Duration {
        self.0
    }

    /// True for a zero duration.
    pub const fn is_zero(self) -> bool {
        self.0.is_zero()
    }
}

impl From<std::time::Duration> for Duration {
    fn from(d: std::time::Duration) -> Self {
        Duration(d)
    }
}

impl From<Duration> for std::time::Duration {
    fn from(d: Duration) -> Self {
        d.0
    }
}

/// Why a duration string was not understood.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DurationParseError {
    /// A number with no unit, such as `500`.
    #[error("`{0}` has no unit: write `{0}ms` for milliseconds or `{0}s` for seconds")]
    MissingUnit(String),
    /// A negative number.
    #[error("`{0}` is negative: a duration must be zero or more")]
    Negative(String),
    /// A unit that is not one of `ns`, `us`, `ms`, `s`, `m`, `h`.
    #[error("`{input}` has an unknown unit `{unit}`: use one of ns, us, ms, s, m, h")]
    UnknownUnit {
        /// The whole input.
        input: String,
        /// The unit as written.
        unit: String,
    },
    /// Anything else that is not `<number><unit>`.
    #[error("`{0}` is not a duration: write a number followed by a unit, such as `500ms` or `2s`")]
    Invalid(String),
    /// A duration too large to represent (more than about 584 years).
    #[error("`{0}` is too large: a duration is at most 18446744073709551615ns (about 584 years)")]
    Overflow(String),
}

impl FromStr for Duration {
    type Err = DurationParseError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let s = input.trim();
        if s.starts_with('-') {
            return Err(DurationParseError::Negative(s.to_owned()));
        }
        let split = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let (number, unit) = s.split_at(split);
        let unit = unit.trim();
        if number.is_empty() {
            return Err(DurationParseError::Invalid(s.to_owned()));
        }
        if unit.is_empty() {
            return Err(DurationParseError::MissingUnit(s.to_owned()));
        }
        let nanos_per_unit: u128 = match unit {
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" | "min" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => {
                return Err(DurationParseError::UnknownUnit {
                    input: s.to_owned(),
                    unit: unit.to_owned(),
                });
            }
        };
        // Exact decimal arithmetic: `1.5s` is 1 500 000 000 ns, and large values keep every
        // digit (a float would round them).
        let invalid = || DurationParseError::Invalid(s.to_owned());
        let overflow = || DurationParseError::Overflow(s.to_owned());
        // The same shape the JSON Schema's pattern accepts: digits, then optionally `.digits`.
        let (whole, fraction) = match number.split_once('.') {
            Some((whole, fraction)) if !fraction.is_empty() && !fraction.contains('.') => {
                (whole, fraction)
            }
            Some(_) => return Err(invalid()),
            None => (number, ""),
        };
        if whole.is_empty() {
            return Err(invalid());
        }
        let whole: u128 = whole.parse().map_err(|_| overflow())?;
        let mut nanos = whole.checked_mul(nanos_per_unit).ok_or_else(overflow)?;
        let mut scale = nanos_per_unit;
        for digit in fraction.chars() {
            let digit = u128::from(digit.to_digit(10).ok_or_else(invalid)?);
            // Digits below a nanosecond are rounded off.
            if scale < 10 {
                if scale == 1 && digit >= 5 {
                    nanos = nanos.checked_add(1).ok_or_else(overflow)?;
                }
                break;
            }
            scale /= 10;
            nanos = nanos.checked_add(digit * scale).ok_or_else(overflow)?;
        }
        let nanos = u64::try_from(nanos).map_err(|_| overflow())?;
        Ok(Duration(std::time::Duration::from_nanos(nanos)))
    }
}

impl fmt::Display for Duration {
    /// Writes the largest unit that represents the value exactly.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.0.as_nanos();
        let units: [(&str, u128); 6] = [
            ("h", 3_600_000_000_000),
            ("m", 60_000_000_000),
            ("s", 1_000_000_000),
            ("ms", 1_000_000),
            ("us", 1_000),
            ("ns", 1),
        ];
        if nanos == 0 {
            return f.write_str("0ms");
        }
        for (unit, per) in units {
            // The largest unit that divides it exactly: `1500ms`, not `1.5s`.
            if nanos.is_multiple_of(per) {
                return write!(f, "{}{}", nanos / per, unit);
            }
        }
        write!(f, "{nanos}ns")
    }
}

impl serde::Serialize for Duration {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Duration {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Duration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration with a unit, such as \"500ms\" or \"2s\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Duration, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Duration, E> {
                Err(E::custom(DurationParseError::MissingUnit(v.to_string())))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Duration, E> {
                if v < 0 {
                    Err(E::custom(DurationParseError::Negative(v.to_string())))
                } else {
                    Err(E::custom(DurationParseError::MissingUnit(v.to_string())))
                }
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Duration, E> {
                if v < 0.0 {
                    Err(E::custom(DurationParseError::Negative(v.to_string())))
                } else {
                    Err(E::custom(DurationParseError::MissingUnit(v.to_string())))
                }
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for Duration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": r"^\s*[0-9]+(\.[0-9]+)?\s*(ns|us|µs|ms|s|m|min|h)\s*$",
            "description": "A duration with a unit: ns, us, ms, s, m or h (\"500ms\", \"2s\"). A bare number is an error.",
            "examples": ["500ms", "2s"]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit() {
        for (s, d) in [
            ("10ns", std::time::Duration::from_nanos(10)),
            ("10us", std::time::Duration::from_micros(10)),
            ("10ms", std::time::Duration::from_millis(10)),
            ("10s", std::time::Duration::from_secs(10)),
            ("2m", std::time::Duration::from_secs(120)),
            ("1h", std::time::Duration::from_secs(3600)),
            ("0.5s", std::time::Duration::from_millis(500)),
            (
                "1.000000001s",
                std::time::Duration::from_nanos(1_000_000_001),
            ),
            (
                "14096838.255019429s",
                std::time::Duration::from_nanos(14_096_838_255_019_429),
            ),
            ("1.5ns", std::time::Duration::from_nanos(2)),
        ] {
            assert_eq!(s.parse::<Duration>().unwrap().as_std(), d, "{s}");
        }
    }

    #[test]
    fn bare_number_names_the_unit_to_add() {
        let err = "500".parse::<Duration>().unwrap_err();
        assert_eq!(err, DurationParseError::MissingUnit("500".into()));
        assert!(err.to_string().contains("`500ms`"));
    }

    #[test]
    fn negative_and_unknown_units_are_errors() {
        assert!(matches!(
            "-5ms".parse::<Duration>(),
            Err(DurationParseError::Negative(_))
        ));
        assert!(matches!(
            "5 fortnights".parse::<Duration>(),
            Err(DurationParseError::UnknownUnit { .. })
        ));
    }

    #[test]
    fn malformed_numbers_are_not_durations() {
        for s in [".5s", "5.s", "1.2.3s", "ms", ""] {
            assert!(
                matches!(s.parse::<Duration>(), Err(DurationParseError::Invalid(_))),
                "{s}"
            );
        }
        assert!(matches!(
            "99999999999h".parse::<Duration>(),
            Err(DurationParseError::Overflow(_))
        ));
    }

    #[test]
    fn rounding_or_adding_the_fraction_past_the_largest_value_is_an_overflow_not_a_panic() {
        for s in [
            // u128::MAX nanoseconds, rounded up by the half.
            "340282366920938463463374607431768211455.5ns",
            // Whole microseconds that fit in u128 nanoseconds, and a fraction that does not.
            "340282366920938463463374607431768211.999999999us",
            "18446744073709551615.5ns",
        ] {
            assert!(
                matches!(s.parse::<Duration>(), Err(DurationParseError::Overflow(_))),
                "{s}"
            );
        }
    }

    #[test]
    fn display_round_trips() {
        for s in ["0ms", "500ms", "1500ms", "2s", "2m", "1h", "10us", "7ns"] {
            let d: Duration = s.parse().unwrap();
            assert_eq!(d.to_string(), s);
            assert_eq!(d.to_string().parse::<Duration>().unwrap(), d);
        }
    }
}
