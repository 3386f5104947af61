//! The link rewriter (DESIGN.md part B "Rewriting rules").
//!
//! Two steps, so that every byte that is not a rewritten attribute value stays as it was
//! (Outlook conditional comments, VML, whitespace, quoting, entities elsewhere):
//! 1. [`find_links`] runs lol_html's streaming tokenizer over the rendered message and records
//!    the byte span of each candidate attribute value: `<a href>`, `<area href>`, `<img src>`
//!    (only with image tracking), and every `href` inside `<!--[if …]>` conditional comments
//!    (VML buttons such as `<v:roundrect href>`), which are tokenized again on their own.
//!    [`crate::rules::classify`] decides per value.
//! 2. [`splice`] copies the input and replaces exactly those spans, then inserts the open pixel
//!    before the last `</body>` end tag (or after the last complete token), as the tokenizer
//!    sees them: never inside a tag, an attribute value, a comment or a `<script>`.

use std::cell::{Cell, RefCell};
use std::ops::Range;
use std::rc::Rc;

use lol_html::html_content::{Element, TextType};
use lol_html::{HtmlRewriter, Settings, doc_comments, doc_text, doctype, element, end_tag};

use crate::rules::{Decision, RuleConfig, classify};

/// What a tracked attribute points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkKind {
    /// A clickable link (`<a>`, `<area>`, VML `href`): a click is an `email_click` event.
    Link,
    /// A tracked image: redirected to the original, no click counted.
    Image,
    /// The open pixel: an `email_open` event.
    Open,
}

impl LinkKind {
    /// Storage code.
    pub fn code(self) -> i64 {
        match self {
            LinkKind::Link => 0,
            LinkKind::Image => 1,
            LinkKind::Open => 2,
        }
    }
    /// From the storage code (unknown codes read as links).
    pub fn from_code(c: i64) -> Self {
        match c {
            1 => LinkKind::Image,
            2 => LinkKind::Open,
            _ => LinkKind::Link,
        }
    }
}

/// A trackable attribute value found in a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundLink {
    /// Byte span of the attribute value in the message (without quotes).
    pub span: Range<usize>,
    /// The URL to store: entities decoded, whitespace trimmed, never re-encoded.
    pub url: String,
    /// Link or image.
    pub kind: LinkKind,
}

/// The rewriter's settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RewriteConfig {
    /// The tracking rules.
    pub rules: RuleConfig,
    /// Also track `<img src>` (images then redirect to the original).
    pub track_images: bool,
}

/// The HTML could not be tokenized.
#[derive(Debug, thiserror::Error)]
#[error("html rewriting failed: {0}")]
pub struct RewriteError(String);

fn opted_out(el: &Element<'_, '_>) -> bool {
    el.has_attribute("data-no-track")
        || el
            .get_attribute("clicktracking")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("off"))
}

fn attr_span(el: &Element<'_, '_>, name: &str) -> Option<(Range<usize>, String)> {
    el.attributes()
        .iter()
        .find(|a| a.name() == name)
        .and_then(|a| Some((a.value_source_location()?.bytes(), a.value())))
}

/// Finds every trackable attribute value of `html`, in document order.
pub fn find_links(html: &str, cfg: &RewriteConfig) -> Result<Vec<FoundLink>, RewriteError> {
    let found = RefCell::new(Vec::new());
    let comments = RefCell::new(Vec::<(usize, String)>::new());
    let push = |el: &Element<'_, '_>, attr: &str, kind: LinkKind, base: usize| {
        if let Some((span, raw)) = attr_span(el, attr)
            && let Decision::Track(url) = classify(&raw, opted_out(el), &cfg.rules)
        {
            let span = span.start + base..span.end + base;
            found.borrow_mut().push(FoundLink { span, url, kind });
        }
    };
    {
        let mut settings = Settings::new()
            .append_element_content_handler(element!("a[href], area[href]", |el| {
                push(el, "href", LinkKind::Link, 0);
                Ok(())
            }))
            .append_document_content_handler(doc_comments!(|c| {
                let text = c.text();
                if text.trim_start().starts_with("[if") {
                    // `<!--` precedes the text.
                    comments
                        .borrow_mut()
                        .push((c.source_location().bytes().start + 4, text));
                }
                Ok(())
            }));
        if cfg.track_images {
            settings = settings.append_element_content_handler(element!("img[src]", |el| {
                push(el, "src", LinkKind::Image, 0);
                Ok(())
            }));
        }
        let mut rewriter = HtmlRewriter::new(settings, |_: &[u8]| {});
        rewriter
            .write(html.as_bytes())
            .map_err(|e| RewriteError(e.to_string()))?;
        rewriter.end().map_err(|e| RewriteError(e.to_string()))?;
    }
    // Conditional comments hold markup only Outlook renders (VML buttons): tokenize it too.
    for (base, text) in comments.take() {
        let settings = Settings::new().append_element_content_handler(element!("*[href]", |el| {
            let tag = el.tag_name();
            if tag != "link" && tag != "base" {
                push(el, "href", LinkKind::Link, base);
            }
            Ok(())
        }));
        let mut rewriter = HtmlRewriter::new(settings, |_: &[u8]| {});
        rewriter
            .write(text.as_bytes())
            .map_err(|e| RewriteError(e.to_string()))?;
        rewriter.end().map_err(|e| RewriteError(e.to_string()))?;
    }
    let mut found = found.into_inner();
    found.sort_by_key(|f| f.span.start);
    Ok(found)
}

/// Copies `html`, replacing each span of `found` by `replacement[i]` and inserting `pixel`
/// (if any) before the last `</body>` end tag, or after the last complete token when there is
/// none (see [`pixel_position`]).
pub fn splice(
    html: &str,
    found: &[FoundLink],
    replacements: &[String],
    pixel: Option<&str>,
) -> String {
    let extra: usize =
        replacements.iter().map(String::len).sum::<usize>() + pixel.map_or(0, str::len);
    let mut out = String::with_capacity(html.len() + extra);
    let pixel_at = pixel.map(|_| pixel_position(html));
    let mut pos = 0;
    let mut pixel_done = false;
    for (f, rep) in found.iter().zip(replacements) {
        if let (Some(at), Some(p)) = (pixel_at, pixel)
            && !pixel_done
            && at <= f.span.start
        {
            out.push_str(&html[pos..at]);
            out.push_str(p);
            pos = at;
            pixel_done = true;
        }
        out.push_str(&html[pos..f.span.start]);
        out.push_str(rep);
        pos = f.span.end;
    }
    if let (Some(at), Some(p)) = (pixel_at, pixel)
        && !pixel_done
    {
        let at = at.max(pos);
        out.push_str(&html[pos..at]);
        out.push_str(p);
        pos = at;
    }
    out.push_str(&html[pos..]);
    out
}

/// Elements whose content the tokenizer reads as text: markup inside them is not markup.
const TEXT_CONTENT: [&str; 10] = [
    "script",
    "style",
    "title",
    "textarea",
    "xmp",
    "iframe",
    "noembed",
    "noframes",
    "noscript",
    "plaintext",
];

/// Where the open pixel goes: just before the last `</body>` end tag the tokenizer meets;
/// without one, just after the last complete token that leaves the tokenizer reading markup
/// (a start tag other than [`TEXT_CONTENT`]'s, an end tag, a closed comment or doctype, plain
/// text).
/// A `</body>` written inside an attribute value, a comment or a `<script>` is not an end tag,
/// and a message cut off inside a tag or comment gets the pixel before that tag, so the pixel
/// is always an element of its own. 0 (always outside any markup) if tokenizing fails.
fn pixel_position(html: &str) -> usize {
    let body_close = Rc::new(Cell::new(None::<usize>));
    let safe_end = Rc::new(Cell::new(0usize));
    let after = |end: usize, safe: &Cell<usize>| safe.set(safe.get().max(end));
    // A `<!--` comment closes with `-->` (or `--!>`); a doctype or a bogus comment (`<!x`,
    // `<?x`, `</ x`) with `>`.
    let closed = |at: Range<usize>, safe: &Cell<usize>| {
        let raw = &html.as_bytes()[at.clone()];
        let done = if raw.starts_with(b"<!--") {
            raw.ends_with(b"-->") || raw.ends_with(b"--!>")
        } else {
            raw.ends_with(b">")
        };
        if done {
            after(at.end, safe);
        }
    };
    let settings = Settings::new()
        .append_element_content_handler(element!("*", |el| {
            let tag = el.tag_name();
            if !TEXT_CONTENT.contains(&tag.as_str()) {
                after(el.source_location().bytes().end, &safe_end);
            }
            let (safe, body) = (Rc::clone(&safe_end), Rc::clone(&body_close));
            let is_body = tag == "body";
            // Void elements have no end tag: nothing to record.
            let _ = el.on_end_tag(end_tag!(move |t| {
                let at = t.source_location().bytes();
                if is_body {
                    body.set(Some(at.start));
                }
                safe.set(safe.get().max(at.end));
                Ok(())
            }));
            Ok(())
        }))
        // A comment or doctype cut off by the end of the message is still reported; it
        // ends in `>` only when it is closed.
        .append_document_content_handler(doc_comments!(|c| {
            closed(c.source_location().bytes(), &safe_end);
            Ok(())
        }))
        .append_document_content_handler(doctype!(|d| {
            closed(d.source_location().bytes(), &safe_end);
            Ok(())
        }))
        .append_document_content_handler(doc_text!(|t| {
            if t.text_type() == TextType::Data {
                // Only a message's last text can end in `<` or `</` (anywhere else they begin
                // the next tag); before the pixel they would turn it into text or a comment.
                let end = t.source_location().bytes().end;
                let text = html.as_bytes()[..end].strip_suffix(b"<");
                let text = text.or_else(|| html.as_bytes()[..end].strip_suffix(b"</"));
                after(text.map_or(end, <[u8]>::len), &safe_end);
            }
            Ok(())
        }));
    let mut rewriter = HtmlRewriter::new(settings, |_: &[u8]| {});
    let tokenized = rewriter
        .write(html.as_bytes())
        .and_then(|()| rewriter.end());
    match tokenized {
        Ok(()) => body_close.get().unwrap_or(safe_end.get()),
        Err(_) => 0,
    }
}

/// The open pixel: a 1×1 image pointing at `url`.
pub fn pixel_html(url: &str) -> String {
    format!(
        "<img src=\"{url}\" width=\"1\" height=\"1\" alt=\"\" border=\"0\" style=\"display:block;width:1px;height:1px;border:0\" />"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `html` rewritten with every tracked value replaced by `R` and the pixel `<P>`.
    fn rewritten(html: &str) -> String {
        let found = find_links(html, &RewriteConfig::default()).expect("tokenizes");
        let reps = vec!["R".to_owned(); found.len()];
        splice(html, &found, &reps, Some("<P>"))
    }

    #[test]
    fn the_pixel_never_lands_in_an_attribute_a_comment_or_a_script() {
        assert_eq!(
            rewritten(r#"<body><a href="https://ex.com/?q=</body>">x</a></body>"#),
            r#"<body><a href="R">x</a><P></body>"#
        );
        assert_eq!(
            rewritten(r#"<body><p title="</body>">x</p>"#),
            r#"<body><p title="</body>">x</p><P>"#
        );
        assert_eq!(
            rewritten("<body><script>var s = '</body>';</script><!-- </body> -->"),
            "<body><script>var s = '</body>';</script><!-- </body> --><P>"
        );
        assert_eq!(
            rewritten("<body><a href=\"https://ex.com/a"),
            "<body><P><a href=\"https://ex.com/a"
        );
        assert_eq!(rewritten("<b>x</b><!-- cut"), "<b>x</b><P><!-- cut");
        assert_eq!(rewritten("<title>t"), "<P><title>t");
        // `</` (or `<`) at the very end is text, but `</` before the pixel would open a bogus
        // comment that swallows it.
        assert_eq!(rewritten("<b>x</b>\n</"), "<b>x</b>\n<P></");
        assert_eq!(rewritten("x <"), "x <P><");
        // Minimized from a fuzz input: a `>` does not close a `<!--` comment.
        assert_eq!(rewritten("<!--B>"), "<P><!--B>");
    }

    #[test]
    fn text_it_does_not_rewrite_is_copied_as_written() {
        let html = "<!DOCTYPE html><BODY><A HREF='https://ex.com/a?x=1&amp;y=2' Title=\"&eacute;\">\
                    &nbsp;</A><!--[if mso]><v:roundrect HREF=\"https://ex.com/v\"></v:roundrect><![endif]-->\
                    <a href=https://ex.com/b>b</a></BODY>";
        let found = find_links(html, &RewriteConfig::default()).expect("tokenizes");
        let urls: Vec<&str> = found.iter().map(|f| f.url.as_str()).collect();
        assert_eq!(
            urls,
            [
                "https://ex.com/a?x=1&y=2",
                "https://ex.com/v",
                "https://ex.com/b"
            ]
        );
        assert_eq!(
            rewritten(html),
            "<!DOCTYPE html><BODY><A HREF='R' Title=\"&eacute;\">\
             &nbsp;</A><!--[if mso]><v:roundrect HREF=\"R\"></v:roundrect><![endif]-->\
             <a href=R>b</a><P></BODY>"
        );
    }
}
