//! Which links are tracked (DESIGN.md part B "Rewriting rules"). One function,
//! [`classify`], decides for one attribute value; the rewriter only finds the attributes.

/// Why a link is left as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Empty after trimming.
    Empty,
    /// Fragment-only (`#top`).
    Fragment,
    /// Not http(s): `mailto:`, `tel:`, `javascript:`, relative links.
    Scheme,
    /// Still holds template syntax after rendering (`{{…}}`, `*|…|*`, `<%…%>`, `[[…]]`, …).
    TemplateTag,
    /// Points at our own tracking domain.
    OwnDomain,
    /// An unsubscribe / opt-out link (never rewritten: it must work without us).
    Unsubscribe,
    /// The element opts out (`clicktracking=off`, `data-no-track`).
    OptOut,
}

/// The decision for one attribute value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Track; the URL to store (entities decoded, whitespace trimmed, never re-encoded).
    Track(String),
    /// Leave the attribute untouched.
    Skip(Skip),
}

/// What the rules need to know about the deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleConfig {
    /// Host names of our tracking domain (lower case); links there are never re-tracked.
    pub own_hosts: Vec<String>,
    /// Case-insensitive substrings that mark an unsubscribe link.
    pub unsubscribe_markers: Vec<String>,
}

impl Default for RuleConfig {
    fn default() -> Self {
        Self {
            own_hosts: Vec::new(),
            unsubscribe_markers: ["unsubscribe", "optout", "opt-out", "opt_out"]
                .map(String::from)
                .to_vec(),
        }
    }
}

const TEMPLATE_MARKERS: [&str; 9] = ["{{", "}}", "{%", "*|", "|*", "<%", "%>", "[[", "{$"];

/// Decides whether the attribute value `raw` (as written in the HTML, entities not decoded)
/// is tracked. `opted_out` says whether the element carries an opt-out attribute.
pub fn classify(raw: &str, opted_out: bool, cfg: &RuleConfig) -> Decision {
    if opted_out {
        return Decision::Skip(Skip::OptOut);
    }
    let decoded = html_escape::decode_html_entities(raw);
    let url = decoded.trim_matches(|c: char| c.is_ascii_whitespace());
    if url.is_empty() {
        return Decision::Skip(Skip::Empty);
    }
    if url.starts_with('#') {
        return Decision::Skip(Skip::Fragment);
    }
    if TEMPLATE_MARKERS.iter().any(|m| url.contains(m)) {
        return Decision::Skip(Skip::TemplateTag);
    }
    let Some(rest) = strip_prefix_ci(url, "https://").or_else(|| strip_prefix_ci(url, "http://"))
    else {
        return Decision::Skip(Skip::Scheme);
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority
        .rsplit('@')
        .next()
        .unwrap_or("")
        .split(':')
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    if host.is_empty() {
        return Decision::Skip(Skip::Scheme);
    }
    if cfg.own_hosts.contains(&host) {
        return Decision::Skip(Skip::OwnDomain);
    }
    let lower = url.to_ascii_lowercase();
    if cfg
        .unsubscribe_markers
        .iter()
        .any(|m| lower.contains(m.as_str()))
    {
        return Decision::Skip(Skip::Unsubscribe);
    }
    Decision::Track(url.to_owned())
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(raw: &str) -> Decision {
        let cfg = RuleConfig {
            own_hosts: vec!["t.example.net".into()],
            ..RuleConfig::default()
        };
        classify(raw, false, &cfg)
    }
    fn track(s: &str) -> Decision {
        Decision::Track(s.into())
    }

    #[test]
    fn decodes_entities_trims_and_never_reencodes() {
        assert_eq!(
            c("https://ex.com/r?a=1&amp;b=2"),
            track("https://ex.com/r?a=1&b=2")
        );
        assert_eq!(c("\n  https://ex.com/x  "), track("https://ex.com/x"));
        assert_eq!(
            c("https://ex.com/caf%C3%A9"),
            track("https://ex.com/caf%C3%A9")
        );
        assert_eq!(
            c("https://ex.com/p#farbe=grün"),
            track("https://ex.com/p#farbe=grün")
        );
        assert_eq!(c("HTTPS://Ex.com/U"), track("HTTPS://Ex.com/U"));
        assert_eq!(c("http://ex.com"), track("http://ex.com"));
    }

    #[test]
    fn skips() {
        assert_eq!(c("#s2"), Decision::Skip(Skip::Fragment));
        assert_eq!(c("  "), Decision::Skip(Skip::Empty));
        assert_eq!(c("mailto:a@b.c"), Decision::Skip(Skip::Scheme));
        assert_eq!(c("tel:+4912345"), Decision::Skip(Skip::Scheme));
        assert_eq!(c("javascript:alert(1)"), Decision::Skip(Skip::Scheme));
        assert_eq!(c("/relative"), Decision::Skip(Skip::Scheme));
        assert_eq!(c("https://"), Decision::Skip(Skip::Scheme));
        assert_eq!(c("{{action_url}}"), Decision::Skip(Skip::TemplateTag));
        assert_eq!(
            c("https://ex.com/?u=*|EMAIL|*"),
            Decision::Skip(Skip::TemplateTag)
        );
        assert_eq!(
            c("<%asm_group_unsubscribe_raw_url%>"),
            Decision::Skip(Skip::TemplateTag)
        );
        assert_eq!(
            c("https://T.example.net/c/abc"),
            Decision::Skip(Skip::OwnDomain)
        );
        assert_eq!(
            c("https://ex.com/Unsubscribe?x=1"),
            Decision::Skip(Skip::Unsubscribe)
        );
        assert_eq!(
            classify("https://ex.com", true, &RuleConfig::default()),
            Decision::Skip(Skip::OptOut)
        );
    }
}
