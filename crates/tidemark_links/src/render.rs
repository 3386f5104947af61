//! Merge fields: `{{ name }}` through Handlebars (a well-kept engine that also reads
//! the Mustache/Handlebars syntax real newsletter templates use: `{{#if}}`, `{{#each}}`).
//! Values are HTML-escaped in the body (`{{{ raw }}}` is the template author's explicit
//! opt-out); the subject is plain text. Strict mode: a recipient whose template needs a field
//! they lack is skipped with a reason, never sent with a blank.

use handlebars::Handlebars;
use serde_json::{Map, Value};

use crate::error::LinksError;

/// A compiled mailing: body and subject templates.
#[derive(Debug)]
pub struct MailTemplate {
    html: Handlebars<'static>,
    subject: Handlebars<'static>,
}

/// A rendered message before link rewriting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The subject.
    pub subject: String,
    /// The HTML body.
    pub html: String,
}

const NAME: &str = "t";

impl MailTemplate {
    /// Compiles both templates; a syntax error is [`LinksError::Invalid`] naming where.
    pub fn compile(html: &str, subject: &str) -> Result<Self, LinksError> {
        let mut h = Handlebars::new();
        h.set_strict_mode(true);
        h.register_template_string(NAME, html)
            .map_err(|e| LinksError::Invalid(format!("html template: {e}")))?;
        let mut s = Handlebars::new();
        s.set_strict_mode(true);
        s.register_escape_fn(handlebars::no_escape);
        s.register_template_string(NAME, subject)
            .map_err(|e| LinksError::Invalid(format!("subject template: {e}")))?;
        Ok(Self {
            html: h,
            subject: s,
        })
    }

    /// Renders for one recipient. `Err` is the skip reason, e.g. `missing field first_name`.
    pub fn render(&self, fields: &Map<String, Value>) -> Result<Rendered, String> {
        let data = Value::Object(fields.clone());
        let reason = |e: handlebars::RenderError| match e.reason() {
            handlebars::RenderErrorReason::MissingVariable(Some(name)) => {
                format!("missing field {name}")
            }
            other => format!("template error: {other}"),
        };
        Ok(Rendered {
            subject: self.subject.render(NAME, &data).map_err(reason)?,
            html: self.html.render(NAME, &data).map_err(reason)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn merge_fields_are_escaped_in_html_not_in_subject() {
        let t =
            MailTemplate::compile("<p>Hi {{ first_name }}</p>", "For {{ first_name }}").unwrap();
        let r = t
            .render(&fields(json!({"first_name": "<script>alert(1)</script>"})))
            .unwrap();
        assert_eq!(r.html, "<p>Hi &lt;script&gt;alert(1)&lt;/script&gt;</p>");
        assert_eq!(r.subject, "For <script>alert(1)</script>");
    }

    #[test]
    fn a_missing_field_is_a_skip_reason() {
        let t = MailTemplate::compile("<p>{{ first_name }} {{ city }}</p>", "x").unwrap();
        assert_eq!(
            t.render(&fields(json!({"first_name": "A"}))).unwrap_err(),
            "missing field city"
        );
    }

    #[test]
    fn bad_syntax_is_refused_at_compile_time() {
        assert!(matches!(
            MailTemplate::compile("<p>{{#if x}}</p>", "s"),
            Err(LinksError::Invalid(_))
        ));
    }
}
