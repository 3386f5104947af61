//! Duplicate keys in a JSON object are refused on every route. serde's derived types refuse
//! them already ("duplicate field"), but a map or a `serde_json::Value` keeps the last value
//! of a repeated key without a word, so `{"kind": "view", "kind": "click"}` would be stored as
//! a click. [`check_no_duplicate_keys`] walks a document once, keeping only the keys of the
//! objects it is inside, and names the first key that repeats.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// `Ok` if no object of the JSON document `text` repeats a key (at any depth). Errors: the
/// document is not JSON, or a key repeats — serde_json's error, with its line and column, e.g.
/// `duplicate key "kind" at line 1 column 33`.
pub fn check_no_duplicate_keys(text: &str) -> Result<(), serde_json::Error> {
    serde_json::from_str::<NoDuplicates>(text).map(|_| ())
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
                return Err(de::Error::custom(format_args!("duplicate key {key:?}")));
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
            r#"[1, "x", null, true, 2.5, -3]"#,
            "{}",
        ] {
            assert!(check_no_duplicate_keys(ok).is_ok(), "{ok}");
        }
    }
}
