//! DESIGN.md part B "Rewriting rules" on the corpus: on every template of
//! `../shared/corpus/emails/` the rewriter's output differs from its input only in the
//! rewritten attribute values and the added pixel, and every http(s) link in `<a>`, `<area>`
//! and conditional-comment VML is tracked except the documented skips.
//!
//! The rewriter ([`find_links`] + [`splice`]) runs on each raw template (no merge fields
//! rendered), with replacements `https://t.example.net/c/<n>` and a [`pixel_html`] pixel. Its
//! spans are never used to check themselves; instead:
//! 1. **An independent scanner** (a small hand-written HTML tag scanner below, not lol_html)
//!    lists every `href` of `<a>`/`<area>` and of any element inside `<!--[if …]>` comments
//!    (VML buttons), with its raw bytes, and classifies it by the documented rules. Its list of
//!    tracked URLs must equal the rewriter's, in document order.
//! 2. **Token streams**: input and output are each tokenized (lol_html as a plain tokenizer:
//!    doctype, start tags with their attributes in order, end tags, merged text, comments) and
//!    compared token by token. They must be identical except (a) `href` values that are
//!    `…/c/<n>` in the output and the scanner's n-th tracked http(s) value in the input, (b)
//!    conditional comments, whose text must be equal once each `…/c/<n>` is replaced by that
//!    original value, and (c) exactly one added pixel `<img>`, just before `</body>`.
//! 3. **Bytes**: removing the pixel and putting each original attribute value back in place of
//!    `…/c/<n>` gives the input byte for byte.
//!
//! Run with `--nocapture` to see the per-file table.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::rc::Rc;

use lol_html::{HtmlRewriter, Settings, doc_comments, doc_text, doctype, element};
use tidemark_links::rewrite::{LinkKind, RewriteConfig, find_links, pixel_html, splice};
use tidemark_links::rules::RuleConfig;

const OWN_HOST: &str = "t.example.net";
const TRACK: &str = "https://t.example.net/c/";
const PIXEL_SRC: &str = "https://t.example.net/o/pixel-id";
/// Documented unsubscribe markers (DESIGN.md part B; `RuleConfig::default()`).
const UNSUBSCRIBE: [&str; 4] = ["unsubscribe", "optout", "opt-out", "opt_out"];
/// Template syntaxes that mark an unresolved tag.
const TEMPLATE_TAGS: [&str; 6] = ["{{", "{%", "*|", "<%", "[[", "{$"];
/// Elements whose content is raw text (no tags inside).
const RAW_TEXT: [&str; 5] = ["style", "script", "title", "textarea", "xmp"];

fn corpus() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus/emails");
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| {
        panic!(
            "the email corpus is expected at {} (shared/ beside the repository): {e}",
            dir.display()
        )
    });
    let mut files: Vec<(String, String)> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "html"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let html = std::fs::read_to_string(&p).unwrap();
            (name, html)
        })
        .collect();
    files.sort();
    assert!(files.len() >= 10, "corpus in {} looks empty", dir.display());
    files
}

// ---------------------------------------------------------------------------------------------
// The independent scanner.

/// What the documented rules say about one href.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Expect {
    Track,
    Empty,
    Fragment,
    /// Not http(s): mailto:, tel:, relative, …
    Scheme,
    /// `http://` with no host.
    NoHost,
    TemplateTag,
    OwnDomain,
    Unsubscribe,
    OptOut,
}

const SKIPS: [(Expect, &str); 8] = [
    (Expect::Fragment, "#frag"),
    (Expect::Empty, "empty"),
    (Expect::Scheme, "scheme"),
    (Expect::NoHost, "no-host"),
    (Expect::TemplateTag, "template"),
    (Expect::OwnDomain, "own"),
    (Expect::Unsubscribe, "unsub"),
    (Expect::OptOut, "opt-out"),
];

#[derive(Debug, Clone)]
struct Href {
    /// The attribute value exactly as written (between the quotes).
    raw: String,
    /// Inside a conditional comment.
    conditional: bool,
    expect: Expect,
    /// Entities decoded, whitespace trimmed.
    url: String,
}

/// Lists the hrefs the rules are about, in document order.
fn scan(html: &str) -> Vec<Href> {
    let mut out = Vec::new();
    scan_markup(html, false, &mut out);
    out
}

fn find_ci(hay: &str, from: usize, needle: &str) -> Option<usize> {
    let (h, n) = (hay.as_bytes(), needle.as_bytes());
    (from..=h.len().saturating_sub(n.len())).find(|&i| h[i..i + n.len()].eq_ignore_ascii_case(n))
}

fn scan_markup(s: &str, conditional: bool, out: &mut Vec<Href>) {
    let b = s.as_bytes();
    let mut i = 0;
    while let Some(off) = s[i..].find('<') {
        let at = i + off;
        let rest = &s[at..];
        if rest.starts_with("<!-->") {
            i = at + 5;
        } else if rest.starts_with("<!--->") {
            i = at + 6;
        } else if rest.starts_with("<!--") {
            let start = at + 4;
            let end = s[start..].find("-->").map_or(s.len(), |e| start + e);
            let text = &s[start..end];
            if !conditional && text.trim_start().to_ascii_lowercase().starts_with("[if") {
                scan_markup(text, true, out);
            }
            i = (end + 3).min(s.len());
        } else if rest.starts_with("<!") || rest.starts_with("<?") || rest.starts_with("</") {
            i = s[at..].find('>').map_or(s.len(), |e| at + e + 1);
        } else if b.get(at + 1).is_some_and(u8::is_ascii_alphabetic) {
            let (tag, attrs, end) = parse_tag(s, at + 1);
            let wanted = if conditional {
                tag != "link" && tag != "base"
            } else {
                tag == "a" || tag == "area"
            };
            let first = |name: &str| attrs.iter().find(|(n, _)| n == name).map(|(_, v)| v);
            if wanted && let Some(Some(raw)) = first("href") {
                let opted_out = first("data-no-track").is_some()
                    || first("clicktracking")
                        .and_then(|v| v.as_deref())
                        .is_some_and(|v| v.trim().eq_ignore_ascii_case("off"));
                let url = decode_entities(raw)
                    .trim_matches(|c: char| c.is_ascii_whitespace())
                    .to_owned();
                out.push(Href {
                    raw: raw.to_owned(),
                    conditional,
                    expect: if opted_out {
                        Expect::OptOut
                    } else {
                        expect(&url)
                    },
                    url,
                });
            }
            i = end;
            if RAW_TEXT.contains(&tag.as_str()) {
                i = find_ci(s, i, &format!("</{tag}")).unwrap_or(s.len());
            }
        } else {
            i = at + 1;
        }
    }
}

/// Parses the tag whose name starts at `start`: (lower-case name, attributes with their raw
/// values, index after the closing `>`).
#[allow(clippy::type_complexity)]
fn parse_tag(s: &str, start: usize) -> (String, Vec<(String, Option<String>)>, usize) {
    let b = s.as_bytes();
    let ws = |c: u8| c.is_ascii_whitespace();
    let mut j = start;
    while j < b.len() && !ws(b[j]) && b[j] != b'/' && b[j] != b'>' {
        j += 1;
    }
    let name = s[start..j].to_ascii_lowercase();
    let mut attrs = Vec::new();
    loop {
        while j < b.len() && (ws(b[j]) || b[j] == b'/') {
            j += 1;
        }
        if j >= b.len() {
            break;
        }
        if b[j] == b'>' {
            j += 1;
            break;
        }
        let n0 = j;
        j += 1; // the first character may be `=`
        while j < b.len() && !ws(b[j]) && b[j] != b'/' && b[j] != b'>' && b[j] != b'=' {
            j += 1;
        }
        let attr = s[n0..j].to_ascii_lowercase();
        let mut k = j;
        while k < b.len() && ws(b[k]) {
            k += 1;
        }
        let mut value = None;
        if k < b.len() && b[k] == b'=' {
            k += 1;
            while k < b.len() && ws(b[k]) {
                k += 1;
            }
            if k < b.len() && (b[k] == b'"' || b[k] == b'\'') {
                let q = b[k] as char;
                let v0 = k + 1;
                let v1 = s[v0..].find(q).map_or(s.len(), |e| v0 + e);
                value = Some(s[v0..v1].to_owned());
                j = (v1 + 1).min(s.len());
            } else {
                let v0 = k;
                while k < b.len() && !ws(b[k]) && b[k] != b'>' {
                    k += 1;
                }
                value = Some(s[v0..k].to_owned());
                j = k;
            }
        }
        attrs.push((attr, value));
    }
    (name, attrs, j)
}

/// Decodes the character references a URL attribute can hold.
fn decode_entities(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let Some(semi) = rest[..rest.len().min(12)].find(';') else {
            out.push('&');
            rest = &rest[1..];
            continue;
        };
        let name = &rest[1..semi];
        let ch = match name {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => name
                .strip_prefix("#x")
                .or_else(|| name.strip_prefix("#X"))
                .map(|h| u32::from_str_radix(h, 16))
                .or_else(|| name.strip_prefix('#').map(str::parse::<u32>))
                .and_then(Result::ok)
                .and_then(char::from_u32),
        };
        match ch {
            Some(c) => {
                out.push(c);
                rest = &rest[semi + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn expect(url: &str) -> Expect {
    let lower = url.to_ascii_lowercase();
    if url.is_empty() {
        return Expect::Empty;
    }
    if url.starts_with('#') {
        return Expect::Fragment;
    }
    if TEMPLATE_TAGS.iter().any(|t| url.contains(t)) {
        return Expect::TemplateTag;
    }
    let Some(rest) = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"))
    else {
        return Expect::Scheme;
    };
    let host = rest
        .split(['/', '?', '#'])
        .next()
        .unwrap_or("")
        .rsplit('@')
        .next()
        .unwrap_or("")
        .split(':')
        .next()
        .unwrap_or("");
    if host.is_empty() {
        return Expect::NoHost;
    }
    if host == OWN_HOST {
        return Expect::OwnDomain;
    }
    if UNSUBSCRIBE.iter().any(|m| lower.contains(m)) {
        return Expect::Unsubscribe;
    }
    Expect::Track
}

// ---------------------------------------------------------------------------------------------
// Token streams.

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Doctype(Option<String>, Option<String>, Option<String>),
    Start {
        name: String,
        attrs: Vec<(String, String)>,
        self_closing: bool,
    },
    End(String),
    Text(String),
    Comment(String),
}

fn tokens(html: &str) -> Vec<Tok> {
    let toks = Rc::new(RefCell::new(Vec::new()));
    {
        let settings = Settings::new()
            .append_element_content_handler(element!("*", |el| {
                toks.borrow_mut().push(Tok::Start {
                    name: el.tag_name(),
                    attrs: el
                        .attributes()
                        .iter()
                        .map(|a| (a.name(), a.value()))
                        .collect(),
                    self_closing: el.is_self_closing(),
                });
                if let Some(handlers) = el.end_tag_handlers() {
                    let t = Rc::clone(&toks);
                    let handler: lol_html::EndTagHandler<'static> = Box::new(move |end| {
                        t.borrow_mut().push(Tok::End(end.name()));
                        Ok(())
                    });
                    handlers.push(handler);
                }
                Ok(())
            }))
            .append_document_content_handler(doctype!(|d| {
                toks.borrow_mut()
                    .push(Tok::Doctype(d.name(), d.public_id(), d.system_id()));
                Ok(())
            }))
            .append_document_content_handler(doc_comments!(|c| {
                toks.borrow_mut().push(Tok::Comment(c.text()));
                Ok(())
            }))
            .append_document_content_handler(doc_text!(|t| {
                toks.borrow_mut().push(Tok::Text(t.as_str().to_owned()));
                Ok(())
            }));
        let mut rw = HtmlRewriter::new(settings, |_: &[u8]| {});
        rw.write(html.as_bytes()).unwrap();
        rw.end().unwrap();
    }
    Rc::try_unwrap(toks).unwrap().into_inner()
}

/// Joins adjacent text tokens (the tokenizer may split text anywhere) and drops empty ones.
fn merge_text(toks: Vec<Tok>) -> Vec<Tok> {
    let mut out: Vec<Tok> = Vec::with_capacity(toks.len());
    for t in toks {
        match (out.last_mut(), t) {
            (_, Tok::Text(s)) if s.is_empty() => {}
            (Some(Tok::Text(prev)), Tok::Text(s)) => prev.push_str(&s),
            (_, t) => out.push(t),
        }
    }
    out
}

/// Fails the enclosing check with a message.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// Replaces every `TRACK<n>` in `text` by the n-th tracked href's raw value; `next` is the n
/// expected next (tracking URLs are numbered in document order).
fn untrack(text: &str, tracked: &[&Href], next: &mut usize) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(TRACK) {
        out.push_str(&rest[..at]);
        let digits_at = at + TRACK.len();
        let len = rest[digits_at..]
            .bytes()
            .take_while(u8::is_ascii_digit)
            .count();
        let n: usize = rest[digits_at..digits_at + len]
            .parse()
            .map_err(|_| format!("a tracking URL without its number: {:?}", &rest[at..]))?;
        ensure!(
            n == *next,
            "tracking URL {n} where {} was due (not in document order)",
            *next
        );
        let original = tracked
            .get(n)
            .ok_or_else(|| format!("tracking URL {n} but only {} tracked", tracked.len()))?;
        out.push_str(&original.raw);
        *next += 1;
        rest = &rest[digits_at + len..];
    }
    out.push_str(rest);
    Ok(out)
}

fn is_http(v: &str) -> bool {
    let v = v.trim_start().to_ascii_lowercase();
    v.starts_with("http://") || v.starts_with("https://")
}

fn context(toks: &[Tok], i: usize) -> String {
    let from = i.saturating_sub(2);
    format!("{:#?}", &toks[from..(i + 3).min(toks.len())])
}

/// Compares the token streams of `input` and `output` (see the module docs).
fn compare_tokens(input: &str, output: &str, tracked: &[&Href]) -> Result<(), String> {
    let inp = merge_text(tokens(input));
    let mut outp = tokens(output);
    let is_pixel = |t: &Tok| {
        matches!(t, Tok::Start { name, attrs, .. }
            if name == "img" && attrs.iter().any(|(n, v)| n == "src" && v == PIXEL_SRC))
    };
    let pixels: Vec<usize> = (0..outp.len()).filter(|&i| is_pixel(&outp[i])).collect();
    ensure!(
        pixels.len() == 1,
        "{} pixel <img>s in the output, not one",
        pixels.len()
    );
    let p = pixels[0];
    if inp.iter().any(|t| matches!(t, Tok::End(n) if n == "body")) {
        let after = outp[p + 1..]
            .iter()
            .find(|t| !matches!(t, Tok::Text(s) if s.is_empty()));
        ensure!(
            after == Some(&Tok::End("body".into())),
            "the pixel is not right before </body> but before {after:?}"
        );
    }
    outp.remove(p);
    let outp = merge_text(outp);
    let mut next = 0;
    for (i, (a, b)) in inp.iter().zip(&outp).enumerate() {
        if a == b {
            continue;
        }
        match (a, b) {
            (
                Tok::Start {
                    name: n1,
                    attrs: a1,
                    self_closing: s1,
                },
                Tok::Start {
                    name: n2,
                    attrs: a2,
                    self_closing: s2,
                },
            ) if n1 == n2 && s1 == s2 && a1.len() == a2.len() => {
                for ((k1, v1), (k2, v2)) in a1.iter().zip(a2) {
                    ensure!(k1 == k2, "attribute names differ at token {i} <{n1}>");
                    if v1 == v2 {
                        continue;
                    }
                    ensure!(k1 == "href", "<{n1} {k1}> changed (token {i})");
                    ensure!(
                        v2.starts_with(TRACK),
                        "<{n1} href> changed to a non-tracking value {v2:?}"
                    );
                    ensure!(is_http(v1), "a non-http(s) href was tracked: {v1:?}");
                    let original = untrack(v2, tracked, &mut next)?;
                    ensure!(
                        &original == v1,
                        "<{n1}> href {v2} stands for {original:?}, the input has {v1:?}"
                    );
                }
            }
            (Tok::Comment(c1), Tok::Comment(c2)) => {
                ensure!(
                    c1.trim_start().starts_with("[if"),
                    "a comment that is not conditional changed: {c1:?}"
                );
                let restored = untrack(c2, tracked, &mut next)?;
                ensure!(
                    &restored == c1,
                    "conditional comment (token {i}) differs beyond its tracked hrefs:\n\
                     input    {c1:?}\nrestored {restored:?}"
                );
            }
            _ => {
                return Err(format!(
                    "token {i} differs:\ninput  {}\noutput {}",
                    context(&inp, i),
                    context(&outp, i)
                ));
            }
        }
    }
    ensure!(
        inp.len() == outp.len(),
        "{} tokens in the input, {} in the output less the pixel",
        inp.len(),
        outp.len()
    );
    ensure!(
        next == tracked.len(),
        "{next} tracking URLs in the output, {} links to track",
        tracked.len()
    );
    Ok(())
}

fn rewrite_config() -> RewriteConfig {
    RewriteConfig {
        rules: RuleConfig {
            own_hosts: vec![OWN_HOST.into()],
            ..RuleConfig::default()
        },
        track_images: false,
    }
}

/// Per-file counts for the table.
#[derive(Debug, Default)]
struct Counts {
    bytes: usize,
    plain: usize,
    conditional: usize,
    tracked: usize,
    tracked_conditional: usize,
    by: BTreeMap<Expect, usize>,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.bytes += o.bytes;
        self.plain += o.plain;
        self.conditional += o.conditional;
        self.tracked += o.tracked;
        self.tracked_conditional += o.tracked_conditional;
        for (e, n) in &o.by {
            *self.by.entry(*e).or_default() += n;
        }
    }

    fn row(&self, name: &str) -> String {
        let mut r = format!(
            "{:<34} {:>6.1} {:>6} {:>5} {:>7} {:>8} |",
            name,
            self.bytes as f64 / 1024.0,
            self.plain,
            self.conditional,
            self.tracked,
            self.tracked_conditional
        );
        for (e, _) in SKIPS {
            r.push_str(&format!(" {:>8}", self.by.get(&e).copied().unwrap_or(0)));
        }
        r.push('\n');
        r
    }
}

fn header() -> String {
    let mut h = format!(
        "{:<34} {:>6} {:>6} {:>5} {:>7} {:>8} | skipped:",
        "file", "KB", "a/area", "cond", "tracked", "in cond"
    );
    h.push('\n');
    h.push_str(&format!("{:<72}|", ""));
    for (_, label) in SKIPS {
        h.push_str(&format!(" {label:>8}"));
    }
    h.push('\n');
    h
}

/// Rewrites `input` and runs the three checks of the module docs; returns the counts.
fn check(file: &str, input: &str) -> Counts {
    let pixel = pixel_html(PIXEL_SRC);
    assert!(
        !input.contains(TRACK) && !input.contains(PIXEL_SRC),
        "{file}: the input already holds our tracking URLs"
    );
    let hrefs = scan(input);
    let tracked: Vec<&Href> = hrefs.iter().filter(|h| h.expect == Expect::Track).collect();

    let found = find_links(input, &rewrite_config()).unwrap();
    let reps: Vec<String> = (0..found.len()).map(|i| format!("{TRACK}{i}")).collect();
    let output = splice(input, &found, &reps, Some(&pixel));

    // 1. The rewriter tracks exactly the links the scanner expects, with the same URLs.
    assert!(found.iter().all(|f| f.kind == LinkKind::Link), "{file}");
    let got: Vec<&str> = found.iter().map(|f| f.url.as_str()).collect();
    let want: Vec<&str> = tracked.iter().map(|h| h.url.as_str()).collect();
    assert_eq!(got, want, "{file}: tracked URLs, in document order");

    // 2. The token streams differ only where allowed.
    if let Err(e) = compare_tokens(input, &output, &tracked) {
        panic!("{file}: {e}");
    }

    // 3. Bytes: without the pixel and with the original values back, it is the input.
    assert_eq!(output.matches(&pixel).count(), 1, "{file}: one pixel");
    let without_pixel = output.replacen(&pixel, "", 1);
    let mut next = 0;
    let restored =
        untrack(&without_pixel, &tracked, &mut next).unwrap_or_else(|e| panic!("{file}: {e}"));
    assert_eq!(next, tracked.len(), "{file}");
    assert!(
        restored == input,
        "{file}: the output with the pixel removed and the original values back differs from \
         the input"
    );

    let mut c = Counts {
        bytes: input.len(),
        conditional: hrefs.iter().filter(|h| h.conditional).count(),
        tracked: tracked.len(),
        tracked_conditional: tracked.iter().filter(|h| h.conditional).count(),
        ..Counts::default()
    };
    c.plain = hrefs.len() - c.conditional;
    for h in &hrefs {
        *c.by.entry(h.expect).or_default() += 1;
    }
    c
}

fn check_corpus(transform: impl Fn(&str) -> String) -> (String, Counts) {
    let mut table = header();
    let mut total = Counts::default();
    let files = corpus();
    for (file, raw) in &files {
        let c = check(file, &transform(raw));
        table.push_str(&c.row(file));
        total.add(&c);
    }
    table.push_str(&total.row(&format!("total ({} files)", files.len())));
    (table, total)
}

#[test]
fn the_rewriter_changes_only_tracked_hrefs_and_adds_one_pixel_on_every_corpus_template() {
    let (table, total) = check_corpus(str::to_owned);
    println!("\ncorpus templates as they are:\n{table}");
    assert!(total.tracked > 0);
}

/// The corpus's placeholder hrefs (`#`, `http://`) pointed at real URLs with `&amp;`, a
/// fragment and surrounding whitespace, so that its VML buttons and most of its anchors are
/// tracked too.
fn fill_placeholders(html: &str) -> String {
    let mut out = String::with_capacity(html.len() * 2);
    let mut rest = html;
    let mut k = 0;
    loop {
        let next = ["href=\"#\"", "href=\"http://\""]
            .iter()
            .filter_map(|p| rest.find(p).map(|at| (at, p.len())))
            .min();
        let Some((at, len)) = next else { break };
        out.push_str(&rest[..at]);
        out.push_str(&format!(
            "href=\" https://shop.example.com/item/{k}?utm_source=mail&amp;utm_medium=email#top \""
        ));
        k += 1;
        rest = &rest[at + len..];
    }
    out.push_str(rest);
    out
}

#[test]
fn the_same_holds_with_the_placeholder_hrefs_filled_in() {
    let (table, total) = check_corpus(fill_placeholders);
    println!("\ncorpus templates with href=\"#\" and href=\"http://\" filled in:\n{table}");
    assert!(total.tracked_conditional > 0, "VML hrefs tracked");
}

// ---------------------------------------------------------------------------------------------
// The checker checks: its pieces on small inputs with known answers.

#[test]
fn the_scanner_finds_hrefs_like_a_browser_would() {
    let html = concat!(
        "<!doctype html><style>a{} <a href=\"https://no.ex/style\"></style>",
        "<!-- <a href=\"https://no.ex/comment\"> -->",
        "<A\n HREF='https://ex.com/a?x=1&amp;y=2'>a</A>",
        "<area href=https://ex.com/area>",
        "<link href=\"https://no.ex/css\">",
        "<a href=\"mailto:x@ex.com\">m</a><a href=\"#top\">t</a><a href=\"\">e</a>",
        "<a data-no-track href=\"https://ex.com/o\">o</a>",
        "<a clicktracking=OFF href=\"https://ex.com/o\">o</a>",
        "<a href=\"{{action_url}}\">t</a><a href=\"https://ex.com/Unsubscribe\">u</a>",
        "<!--[if mso]><v:roundrect href=\"https://ex.com/vml\"><link href=\"https://no.ex\">",
        "<![endif]--><a title=\"x>y\" href=\"http://\">h</a>",
        "<a href=\"https://t.example.net/c/1\">own</a>",
    );
    let got: Vec<(Expect, bool, &str)> = scan(html)
        .iter()
        .map(|h| {
            (
                h.expect,
                h.conditional,
                &html[html.find(&h.raw).unwrap()..][..h.raw.len()],
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (Expect::Track, false, "https://ex.com/a?x=1&amp;y=2"),
            (Expect::Track, false, "https://ex.com/area"),
            (Expect::Scheme, false, "mailto:x@ex.com"),
            (Expect::Fragment, false, "#top"),
            (Expect::Empty, false, ""),
            (Expect::OptOut, false, "https://ex.com/o"),
            (Expect::OptOut, false, "https://ex.com/o"),
            (Expect::TemplateTag, false, "{{action_url}}"),
            (Expect::Unsubscribe, false, "https://ex.com/Unsubscribe"),
            (Expect::Track, true, "https://ex.com/vml"),
            (Expect::NoHost, false, "http://"),
            (Expect::OwnDomain, false, "https://t.example.net/c/1"),
        ]
    );
    assert_eq!(scan(html)[0].url, "https://ex.com/a?x=1&y=2");
    assert_eq!(
        decode_entities("a&amp;b&#38;c&#x26;d&copy;e&"),
        "a&b&c&d&copy;e&"
    );
}

#[test]
fn the_token_comparison_rejects_any_other_change() {
    let input = "<html><body><a href=\"https://ex.com/x\">x</a><!--[if mso]><v:rect href=\"https://ex.com/v\"><![endif]--></body></html>";
    let hrefs = scan(input);
    let tracked: Vec<&Href> = hrefs.iter().collect();
    let pixel = pixel_html(PIXEL_SRC);
    let good = format!(
        "<html><body><a href=\"{TRACK}0\">x</a><!--[if mso]><v:rect href=\"{TRACK}1\"><![endif]-->{pixel}</body></html>"
    );
    compare_tokens(input, &good, &tracked).unwrap();
    for bad in [
        // Text changed.
        good.replace(">x<", ">y<"),
        // Another attribute changed.
        good.replace("<a href", "<a class=\"c\" href"),
        // Comment changed beyond its href.
        good.replace("v:rect href", "v:rect  href"),
        // Links swapped.
        good.replace(&format!("{TRACK}0"), "SWAP")
            .replace(&format!("{TRACK}1"), &format!("{TRACK}0"))
            .replace("SWAP", &format!("{TRACK}1")),
        // A token lost.
        good.replace("</a>", ""),
        // No pixel, two pixels, pixel elsewhere.
        good.replace(&pixel, ""),
        good.replace(&pixel, &format!("{pixel}{pixel}")),
        good.replace(&pixel, "")
            .replace("<body>", &format!("<body>{pixel}")),
    ] {
        assert!(
            compare_tokens(input, &bad, &tracked).is_err(),
            "accepted: {bad}"
        );
    }
}
