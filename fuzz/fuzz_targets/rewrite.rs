//! The HTML rewriter. Invariants: every found span is an attribute value whose text, read as
//! written, is the URL stored; the output differs from the input only in the rewritten values
//! and the open pixel; and the pixel is an element of its own (never inside a tag, an attribute
//! value, a comment or raw text such as `<script>`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tidemark_links::rewrite::{LinkKind, RewriteConfig, find_links, pixel_html, splice};
use tidemark_links::rules::{Decision, RuleConfig, classify};

const PIXEL: &str = "https://pixel.invalid/o/fuzz";

/// How many `<img>` elements of `html` point at the pixel URL.
fn pixels(html: &str) -> usize {
    let cfg = RewriteConfig {
        rules: RuleConfig::default(),
        track_images: true,
    };
    find_links(html, &cfg).map_or(0, |found| {
        found
            .iter()
            .filter(|f| f.kind == LinkKind::Image && f.url == PIXEL)
            .count()
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let Ok(html) = std::str::from_utf8(rest) else {
        return;
    };
    let cfg = RewriteConfig {
        rules: RuleConfig {
            own_hosts: vec!["t.invalid".into()],
            ..RuleConfig::default()
        },
        track_images: flags & 1 == 1,
    };
    let Ok(found) = find_links(html, &cfg) else {
        return;
    };
    let mut end = 0;
    for f in &found {
        assert!(f.span.start >= end, "spans overlap: {found:?}");
        end = f.span.end;
        let raw = html.get(f.span.clone()).expect("span on char boundaries");
        assert_eq!(
            classify(raw, false, &cfg.rules),
            Decision::Track(f.url.clone()),
            "the stored URL is not the attribute as written"
        );
    }
    let reps: Vec<String> = (0..found.len())
        .map(|i| format!("https://t.invalid/c/{i}"))
        .collect();
    let plain = splice(html, &found, &reps, None);
    let mut expected = String::new();
    let mut pos = 0;
    for (f, r) in found.iter().zip(&reps) {
        expected.push_str(&html[pos..f.span.start]);
        expected.push_str(r);
        pos = f.span.end;
    }
    expected.push_str(&html[pos..]);
    assert_eq!(plain, expected);

    let pixel = pixel_html(PIXEL);
    let out = splice(html, &found, &reps, Some(&pixel));
    assert!(
        out.match_indices(&pixel)
            .any(|(at, _)| out[..at].to_owned() + &out[at + pixel.len()..] == plain),
        "the output differs from the input by more than the values and the pixel"
    );
    assert_eq!(
        pixels(&out),
        pixels(&plain) + 1,
        "the pixel is not an element of its own"
    );
});
