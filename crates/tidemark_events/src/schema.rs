//! The events schema (DESIGN.md part C "Schema", seed 002): one measurement, one tag (`event`,
//! the kind) whose values are a closed set declared in config, and fields with declared types.
//! Identifiers are fields, never tags — that is the one rule that keeps series cardinality
//! equal to the number of kinds. Anything undeclared is refused with a message naming it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The type of a declared field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    /// A string.
    String,
    /// A 64-bit integer (`42i` in line protocol).
    Int,
    /// A float.
    Float,
    /// A boolean.
    Bool,
    /// A numeric identifier: an integer, or a string of decimal digits (the seed's writer sends
    /// `listing_id` as a string field).
    Id,
}

/// A field value as parsed from JSON or line protocol.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
    /// A float (also unsuffixed numbers in line protocol).
    Float(f64),
    /// A boolean.
    Bool(bool),
}

impl FieldValue {
    fn type_name(&self) -> &'static str {
        match self {
            FieldValue::Str(_) => "string",
            FieldValue::Int(_) => "integer",
            FieldValue::Float(_) => "float",
            FieldValue::Bool(_) => "boolean",
        }
    }
}

/// The schema in force (`[events]` in the config).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Schema {
    /// The measurement name line protocol must use (default `listing_event`).
    pub measurement: String,
    /// The one tag key (default `event`); its value is the event kind.
    pub tag: String,
    /// The closed set of kinds.
    pub kinds: Vec<String>,
    /// Declared fields and their types.
    pub fields: BTreeMap<String, FieldType>,
}

impl Default for Schema {
    fn default() -> Self {
        use FieldType::*;
        let fields = [
            ("listing_id", Id),
            ("user_id", String),
            ("device_id", String),
            ("session_id", String),
            ("page_url", String),
            ("count", Int),
            ("email", String),
            ("mailing_id", String),
            ("link_id", String),
            ("position", Int),
            ("ua_class", String),
            ("bot", Bool),
            ("conversation_id", String),
        ]
        .into_iter()
        .map(|(k, t)| (k.to_owned(), t))
        .collect();
        Self {
            measurement: "listing_event".into(),
            tag: "event".into(),
            kinds: ["view", "click", "contact", "email_open", "email_click"]
                .map(Into::into)
                .to_vec(),
            fields,
        }
    }
}

impl Schema {
    /// Whether this schema keeps everything of `older` (same measurement and tag, every kind,
    /// every field with its type): what nodes sharing stores may move to one at a time, since
    /// a node still on `older` then refuses only what is new. Errors: what it drops or
    /// changes.
    pub fn extends(&self, older: &Schema) -> Result<(), String> {
        let mut lost = Vec::new();
        if self.measurement != older.measurement {
            lost.push(format!(
                "measurement {:?} (not {:?})",
                older.measurement, self.measurement
            ));
        }
        if self.tag != older.tag {
            lost.push(format!("tag {:?} (not {:?})", older.tag, self.tag));
        }
        for k in &older.kinds {
            if !self.kinds.contains(k) {
                lost.push(format!("kind {k:?}"));
            }
        }
        for (name, t) in &older.fields {
            match self.fields.get(name) {
                Some(mine) if mine == t => {}
                Some(mine) => lost.push(format!("field `{name}` as {t:?} (not {mine:?})")),
                None => lost.push(format!("field `{name}`")),
            }
        }
        if lost.is_empty() {
            Ok(())
        } else {
            Err(lost.join(", "))
        }
    }

    /// Checks a kind against the closed set.
    pub fn check_kind(&self, kind: &str) -> Result<(), String> {
        if self.kinds.iter().any(|k| k == kind) {
            Ok(())
        } else {
            Err(format!(
                "undeclared value {kind:?} of tag `{}` (declared: {})",
                self.tag,
                self.kinds.join(", ")
            ))
        }
    }

    /// Checks one field against its declaration and returns the value in its declared type.
    pub fn check_field(&self, name: &str, value: FieldValue) -> Result<FieldValue, String> {
        let Some(&ty) = self.fields.get(name) else {
            return Err(format!("undeclared field `{name}`"));
        };
        let conflict = |v: &FieldValue| {
            format!(
                "field `{name}` is declared {ty:?} but got a {} value",
                v.type_name()
            )
            .to_lowercase()
        };
        match (ty, value) {
            (FieldType::String, v @ FieldValue::Str(_))
            | (FieldType::Int, v @ FieldValue::Int(_))
            | (FieldType::Float, v @ FieldValue::Float(_))
            | (FieldType::Bool, v @ FieldValue::Bool(_)) => Ok(v),
            (FieldType::Id, FieldValue::Int(i)) if i >= 0 => Ok(FieldValue::Int(i)),
            (FieldType::Id, FieldValue::Int(i)) => {
                Err(format!("field `{name}` must be a non-negative id, got {i}"))
            }
            (FieldType::Float, FieldValue::Int(i)) => Ok(FieldValue::Float(i as f64)),
            (FieldType::Id, FieldValue::Str(s)) => s
                .parse::<i64>()
                .ok()
                .filter(|_| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .map(FieldValue::Int)
                .ok_or_else(|| format!("field `{name}` must be a decimal id, got {s:?}")),
            (_, v) => Err(conflict(&v)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_types_are_enforced() {
        let s = Schema::default();
        assert_eq!(
            s.check_field("listing_id", FieldValue::Str("48213".into())),
            Ok(FieldValue::Int(48213))
        );
        assert_eq!(
            s.check_field("listing_id", FieldValue::Int(7)),
            Ok(FieldValue::Int(7))
        );
        assert!(
            s.check_field("listing_id", FieldValue::Str("abc".into()))
                .unwrap_err()
                .contains("decimal id")
        );
        assert!(
            s.check_field("count", FieldValue::Str("1".into()))
                .unwrap_err()
                .contains("declared int")
        );
        assert!(
            s.check_field("listing_id", FieldValue::Int(-1))
                .unwrap_err()
                .contains("non-negative")
        );
        assert!(
            s.check_field("colour", FieldValue::Int(1))
                .unwrap_err()
                .contains("undeclared field `colour`")
        );
        assert!(
            s.check_kind("purchase")
                .unwrap_err()
                .contains("undeclared value \"purchase\"")
        );
        assert!(s.check_kind("view").is_ok());
    }
}
