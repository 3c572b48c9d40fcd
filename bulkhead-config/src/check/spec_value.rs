//! Reading one checked key into the typed spec, with serde's errors kept as data.
//!
//! A small `Deserializer` over a JSON value whose error type records what serde's derived
//! code reports — an unknown variant with the variants it expected, a missing field, the
//! type it expected — so the message the user reads is built from those values (with the
//! project's "did you mean"), never by reading serde's English back out of a string.
//!
//! Invariant: this reads exactly what `serde_json::from_value` would (the same visitor
//! calls for the same values); only the error type differs.

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::{MapAccessDeserializer, MapDeserializer, SeqDeserializer};
use serde::de::{self, IntoDeserializer, Unexpected, Visitor};
use serde::forward_to_deserialize_any;
use serde_json::Value;

use crate::yaml::Node;

use super::words::{did_you_mean, quoted_list};

/// Reads `T` from `value`, or says what is wrong with it in the reader's terms.
pub(super) fn read<'a, T: de::Deserialize<'a>>(value: &'a Value) -> Result<T, SpecError> {
    T::deserialize(Reader::<SpecError>::new(value))
}

/// What serde's derived code reported about a value, as data.
#[derive(Debug)]
pub(super) enum SpecError {
    /// A string that names none of an enum's variants.
    UnknownVariant {
        given: String,
        expected: &'static [&'static str],
    },
    /// A mapping without a required key.
    MissingField(&'static str),
    /// A value of the wrong type or shape; `expected` is serde's description.
    Mismatch { expected: String },
    /// Anything else (a type's own message).
    Other(String),
}

impl SpecError {
    /// The diagnostic's message for `value`, the node the key holds.
    pub(super) fn explain(&self, value: &Node) -> String {
        match self {
            SpecError::UnknownVariant { given, expected } => {
                let expected: Vec<String> = expected.iter().map(|v| (*v).to_owned()).collect();
                let hint = match did_you_mean(given, &expected) {
                    Some(best) => format!("did you mean `{best}`?"),
                    None => format!("expected one of {}", quoted_list(&expected)),
                };
                format!("unknown value `{given}`: {hint}")
            }
            SpecError::MissingField(field) => {
                format!("is missing `{field}`: add it (see docs/config-reference.md)")
            }
            SpecError::Mismatch { expected } => {
                let expected = match expected.as_str() {
                    "u32" => "a whole number",
                    "a boolean" => "`true` or `false`",
                    "f64" => "a number such as 0.8",
                    other => other,
                };
                format!(
                    "{} is not valid here: expected {expected}",
                    value.describe()
                )
            }
            SpecError::Other(message) => message.clone(),
        }
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpecError::UnknownVariant { given, .. } => write!(f, "unknown variant `{given}`"),
            SpecError::MissingField(field) => write!(f, "missing field `{field}`"),
            SpecError::Mismatch { expected } => write!(f, "expected {expected}"),
            SpecError::Other(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for SpecError {}

impl de::Error for SpecError {
    fn custom<T: fmt::Display>(message: T) -> Self {
        SpecError::Other(message.to_string())
    }

    fn invalid_type(_: Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        SpecError::Mismatch {
            expected: expected.to_string(),
        }
    }

    fn invalid_value(_: Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        SpecError::Mismatch {
            expected: expected.to_string(),
        }
    }

    fn invalid_length(_: usize, expected: &dyn de::Expected) -> Self {
        SpecError::Mismatch {
            expected: expected.to_string(),
        }
    }

    fn unknown_variant(given: &str, expected: &'static [&'static str]) -> Self {
        SpecError::UnknownVariant {
            given: given.to_owned(),
            expected,
        }
    }

    fn missing_field(field: &'static str) -> Self {
        SpecError::MissingField(field)
    }
}

/// A JSON value as a `Deserializer` with the error type `E`.
struct Reader<'a, E> {
    value: &'a Value,
    error: PhantomData<E>,
}

impl<'a, E> Reader<'a, E> {
    fn new(value: &'a Value) -> Self {
        Reader {
            value,
            error: PhantomData,
        }
    }
}

impl<'a, E: de::Error> IntoDeserializer<'a, E> for Reader<'a, E> {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

/// The entries of a JSON object, as serde's map access.
fn entries<'a, E: de::Error>(
    map: &'a serde_json::Map<String, Value>,
) -> MapDeserializer<'a, impl Iterator<Item = (&'a str, Reader<'a, E>)>, E> {
    MapDeserializer::new(map.iter().map(|(k, v)| (k.as_str(), Reader::new(v))))
}

impl<'de, E: de::Error> de::Deserializer<'de> for Reader<'de, E> {
    type Error = E;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, E> {
        match self.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => visitor.visit_u64(u),
                (None, Some(i), _) => visitor.visit_i64(i),
                (None, None, f) => visitor.visit_f64(f.unwrap_or(f64::NAN)),
            },
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(items) => {
                let mut seq = SeqDeserializer::new(items.iter().map(Reader::new));
                let out = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(out)
            }
            Value::Object(map) => {
                let mut map = entries(map);
                let out = visitor.visit_map(&mut map)?;
                map.end()?;
                Ok(out)
            }
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, E> {
        match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, E> {
        match self.value {
            Value::String(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            Value::Object(map) if map.len() == 1 => {
                visitor.visit_enum(MapAccessDeserializer::new(entries(map)))
            }
            Value::Object(_) => Err(E::invalid_value(
                Unexpected::Map,
                &"a map with a single key",
            )),
            _ => Err(E::invalid_type(unexpected(self.value), &"string or map")),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, E> {
        visitor.visit_newtype_struct(self)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}

fn unexpected(value: &Value) -> Unexpected<'_> {
    match value {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => Unexpected::Unsigned(u),
            (None, Some(i)) => Unexpected::Signed(i),
            (None, None) => Unexpected::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file_format::BulkheadSpec;

    #[test]
    fn an_unknown_variant_keeps_the_variants_serde_expected() {
        let value = serde_json::json!({ "kind": "thread_pool" });
        match read::<BulkheadSpec>(&value) {
            Err(SpecError::UnknownVariant { given, expected }) => {
                assert_eq!(given, "thread_pool");
                assert_eq!(expected, ["semaphore", "thread-pool"]);
            }
            other => panic!("expected an unknown variant, got {other:?}"),
        }
    }

    #[test]
    fn a_missing_field_is_named() {
        let value = serde_json::json!({ "rate_limit": { "limit_for_period": 5 } });
        assert!(matches!(
            read::<BulkheadSpec>(&value),
            Err(SpecError::MissingField("refresh_period"))
        ));
    }

    #[test]
    fn reads_what_serde_json_reads() {
        let value = serde_json::json!({
            "kind": "thread-pool", "max_threads": 4, "on_full": { "wait": "2s" },
            "saturation": { "active_warning": 0.5 }, "thread_name_prefix": null
        });
        let ours = read::<BulkheadSpec>(&value).unwrap();
        let theirs: BulkheadSpec = serde_json::from_value(value).unwrap();
        assert_eq!(ours, theirs);
    }
}
