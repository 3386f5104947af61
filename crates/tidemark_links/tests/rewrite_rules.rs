//! DESIGN.md part B "Rewriting rules": one case per rule, each with the exact expected output.

use tidemark_links::rewrite::{FoundLink, LinkKind, RewriteConfig, find_links, splice};
use tidemark_links::rules::RuleConfig;

fn cfg(track_images: bool) -> RewriteConfig {
    RewriteConfig {
        rules: RuleConfig {
            own_hosts: vec!["t.example.net".into()],
            ..RuleConfig::default()
        },
        track_images,
    }
}

/// Rewrites with replacements `T0`, `T1`, … and no pixel; returns (output, stored URLs).
fn rewrite(html: &str) -> (String, Vec<String>) {
    rewrite_with(html, false)
}

fn rewrite_with(html: &str, images: bool) -> (String, Vec<String>) {
    let found: Vec<FoundLink> = find_links(html, &cfg(images)).unwrap();
    let reps: Vec<String> = (0..found.len()).map(|i| format!("T{i}")).collect();
    (
        splice(html, &found, &reps, None),
        found.into_iter().map(|f| f.url).collect(),
    )
}

#[test]
fn entities_are_decoded_before_storing() {
    let (out, urls) = rewrite(r#"<a href="https://ex.com/r?a=1&amp;b=2">x</a>"#);
    assert_eq!(urls, ["https://ex.com/r?a=1&b=2"]);
    assert_eq!(out, r#"<a href="T0">x</a>"#);
}

#[test]
fn percent_encoding_is_kept_byte_for_byte() {
    let (out, urls) = rewrite(r#"<a href="https://ex.com/caf%C3%A9">café</a>"#);
    assert_eq!(urls, ["https://ex.com/caf%C3%A9"]);
    assert_eq!(out, r#"<a href="T0">café</a>"#);
}

#[test]
fn vml_inside_outlook_conditional_comments_is_tracked() {
    let html = r#"<!--[if mso]><v:roundrect href="https://ex.com/buy">…</v:roundrect><![endif]--><a href="https://ex.com/buy">"#;
    let (out, urls) = rewrite(html);
    assert_eq!(urls, ["https://ex.com/buy", "https://ex.com/buy"]);
    assert_eq!(
        out,
        r#"<!--[if mso]><v:roundrect href="T0">…</v:roundrect><![endif]--><a href="T1">"#
    );
}

#[test]
fn whitespace_around_and_inside_the_attribute() {
    let (out, urls) = rewrite("<a\n href=\"\n  https://ex.com/x  \"\n>");
    assert_eq!(urls, ["https://ex.com/x"]);
    assert_eq!(out, "<a\n href=\"T0\"\n>");
}

#[test]
fn case_quotes_and_unquoted_values() {
    let html = "<A HREF=\"https://ex.com/a\">a</A><a href='https://ex.com/b'>b</a><a href=https://ex.com/u>u</a>";
    let (out, urls) = rewrite(html);
    assert_eq!(
        urls,
        ["https://ex.com/a", "https://ex.com/b", "https://ex.com/u"]
    );
    assert_eq!(
        out,
        "<A HREF=\"T0\">a</A><a href='T1'>b</a><a href=T2>u</a>"
    );
}

#[test]
fn fragments() {
    let html = r##"<a href="#s2">jump</a><a href="https://ex.com/p#farbe=grün">p</a>"##;
    let (out, urls) = rewrite(html);
    assert_eq!(urls, ["https://ex.com/p#farbe=grün"]);
    assert_eq!(out, r##"<a href="#s2">jump</a><a href="T0">p</a>"##);
}

#[test]
fn untouched_links() {
    let html = concat!(
        r#"<link rel="stylesheet" href="https://ex.com/s.css">"#,
        r#"<a href="mailto:hi@ex.com">m</a><a href="tel:+491234">t</a>"#,
        r#"<img src="https://ex.com/i.png">"#,
        r#"<a href="https://t.example.net/c/abc">own</a>"#,
        r#"<a href="https://ex.com/unsubscribe?u=1">unsub</a>"#,
        r#"<a clicktracking=off href="https://ex.com/o1">o1</a>"#,
        r#"<a data-no-track href="https://ex.com/o2">o2</a>"#,
        r#"<a href="{{action_url}}">tag</a>"#,
    );
    let (out, urls) = rewrite(html);
    assert!(urls.is_empty(), "{urls:?}");
    assert_eq!(out, html);
}

#[test]
fn images_only_when_image_tracking_is_on() {
    let html = r#"<img src="https://ex.com/i.png"><a href="https://ex.com/x">x</a>"#;
    let found = find_links(html, &cfg(true)).unwrap();
    let kinds: Vec<LinkKind> = found.iter().map(|f| f.kind).collect();
    assert_eq!(kinds, [LinkKind::Image, LinkKind::Link]);
    let (out, _) = rewrite_with(html, true);
    assert_eq!(out, r#"<img src="T0"><a href="T1">x</a>"#);
}

#[test]
fn the_pixel_goes_before_the_last_body_end_tag() {
    let html = "<html><body><a href=\"https://ex.com/x\">x</a><p>bye</p></BODY></html>";
    let found = find_links(html, &cfg(false)).unwrap();
    let out = splice(html, &found, &["T0".into()], Some("<img P>"));
    assert_eq!(
        out,
        "<html><body><a href=\"T0\">x</a><p>bye</p><img P></BODY></html>"
    );
    let out = splice("<p>no body</p>", &[], &[], Some("<img P>"));
    assert_eq!(out, "<p>no body</p><img P>");
}
