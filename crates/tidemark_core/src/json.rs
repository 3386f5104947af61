//! Duplicate keys in a JSON object are refused on every route. serde's derived types refuse
//! them already ("duplicate field"), but a map or a `serde_json::Value` keeps the last value
//! of a repeated key without a word, so `{"kind": "view", "kind": "click"}` would be stored as
//! a click. [`check_no_duplicate_keys`] walks a document once, keeping only the keys of the
//! objects it is inside, and names the first key that repeats; [`UniqueKeys`] builds a
//! `serde_json::Value` in the same single pass, for bodies read as values.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// `Ok` if no object of the JSON document `text` repeats a key (at any depth). Errors: the
/// document is not JSON, or a key repeats — serde_json's error, with its line and column, e.g.
/// `duplicate key "kind" at line 1 column 33`.
pub fn check_no_duplicate_keys(text: &str) -> Result<(), serde_json::Error> {
    serde_json::from_str::<NoDuplicates>(text).map(|_| ())
}

/// A `serde_json::Value` whose objects have no repeated key: deserializing one refuses a
/// repeated key with serde_json's error (`duplicate key "kind" at line 1 column 23`), in the
/// one pass that builds the value.
#[derive(Debug, Clone, PartialEq)]
pub struct UniqueKeys(pub Value);

impl<'de> Deserialize<'de> for UniqueKeys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(UniqueKeysVisitor)
            .map(UniqueKeys)
    }
}

struct UniqueKeysVisitor;

impl<'de> Visitor<'de> for UniqueKeysVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(UniqueKeys(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(duplicate(&key));
            }
            let UniqueKeys(v) = map.next_value()?;
            object.insert(key, v);
        }
        Ok(Value::Object(object))
    }
}

/// The error of a repeated `key`.
fn duplicate<E: de::Error>(key: &str) -> E {
    E::custom(format_args!("duplicate key {key:?}"))
}

/// A JSON value of any shape whose objects have no repeated key (parsed and dropped).
struct NoDuplicates;

impl<'de> Deserialize<'de> for NoDuplicates {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NoDuplicatesVisitor)
    }
}

struct NoDuplicatesVisitor;

impl<'de> Visitor<'de> for NoDuplicatesVisitor {
    type Value = NoDuplicates;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }

    fn visit_i64<E>(self, _: i64) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }

    fn visit_u64<E>(self, _: u64) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }

    fn visit_f64<E>(self, _: f64) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }

    fn visit_str<E>(self, _: &str) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }

    fn visit_unit<E>(self) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NoDuplicates, A::Error> {
        while seq.next_element::<NoDuplicates>()?.is_some() {}
        Ok(NoDuplicates)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NoDuplicates, A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if seen.contains(&key) {
                return Err(duplicate(&key));
            }
            seen.insert(key);
            map.next_value::<NoDuplicates>()?;
        }
        Ok(NoDuplicates)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_key_is_named_at_any_depth_and_distinct_keys_pass() {
        let err = |text: &str| check_no_duplicate_keys(text).unwrap_err().to_string();
        assert_eq!(
            err(r#"{"kind": "view", "kind": "click"}"#),
            r#"duplicate key "kind" at line 1 column 23"#
        );
        assert_eq!(
            err(r#"[{"a": 1}, {"b": {"c": 1, "c": 2}}]"#),
            r#"duplicate key "c" at line 1 column 29"#
        );
        assert!(err("{").contains("EOF while parsing"));
        for ok in [
            r#"{"a": 1, "b": {"a": 2}, "c": [{"a": 3}, {"a": 4}]}"#,
            r#"[1, "x", null, true, 2.5, -3, 18446744073709551615]"#,
            "{}",
        ] {
            assert!(check_no_duplicate_keys(ok).is_ok(), "{ok}");
            // As a value: the same as serde_json's own.
            let UniqueKeys(v) = serde_json::from_str(ok).unwrap();
            assert_eq!(v, serde_json::from_str::<Value>(ok).unwrap(), "{ok}");
        }
        let as_value = |text: &str| {
            serde_json::from_str::<UniqueKeys>(text)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            as_value(r#"{"kind": "view", "kind": "click"}"#),
            r#"duplicate key "kind" at line 1 column 23"#
        );
        assert_eq!(
            as_value(r#"[{"a": 1}, {"b": {"c": 1, "c": 2}}]"#),
            r#"duplicate key "c" at line 1 column 29"#
        );
    }
}
