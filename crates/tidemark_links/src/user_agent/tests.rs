use super::*;

fn class(ua: &str) -> UaClass {
    classify_user_agent(Some(ua))
}

#[test]
fn browsers_and_mail_clients_are_people() {
    for (ua, want) in [
        (
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36",
            UaClass::Desktop,
        ),
        (
            "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1",
            UaClass::Mobile,
        ),
        (
            "Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0",
            UaClass::Desktop,
        ),
        // Outlook desktop fetching images, in its two forms.
        (
            "Microsoft Office/16.0 (Windows NT 10.0; Microsoft Outlook 16.0.17328; Pro)",
            UaClass::Desktop,
        ),
        (
            "Mozilla/4.0 (compatible; ms-office; MSOffice 16)",
            UaClass::Desktop,
        ),
        // Apple Mail on iOS.
        (
            "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
            UaClass::Mobile,
        ),
        (
            "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Mobile Safari/537.36",
            UaClass::Mobile,
        ),
        (
            "Mozilla/5.0 (X11; Linux x86_64; rv:115.0) Gecko/20100101 Thunderbird/115.9.0",
            UaClass::Desktop,
        ),
    ] {
        assert_eq!(class(ua), want, "{ua}");
        assert!(!is_bot_hit(false, class(ua)), "{ua}");
    }
}

/// From the crate's list: crawlers, previewers, headless browsers, and HTTP libraries and
/// tools (a click from a script is not a person's click).
#[test]
fn crawlers_and_http_libraries_are_bots() {
    for ua in [
        "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
        "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
        "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)",
        "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/120.0.0.0 Safari/537.36",
        "curl/8.5.0",
        "Wget/1.21.4",
        "python-requests/2.31.0",
        "Python-urllib/3.11",
        "Go-http-client/1.1",
        "okhttp/4.12.0",
        "Java/17.0.2",
    ] {
        assert_eq!(class(ua), UaClass::Bot, "{ua}");
        assert!(is_bot_hit(false, class(ua)), "{ua}");
    }
}

/// Tidemark's own list, on top of the crate's: mail-security scanners and the mail
/// providers' image proxies (machine opens).
#[test]
fn mail_scanners_and_image_proxies_are_bots() {
    for ua in [
        "Microsoft Office SafeLinks",
        "Mozilla/5.0 (compatible; Proofpoint URL Defense)",
        "Mimecast URL Protect",
        "Barracuda Sentinel (EE)",
        "Symantec Email Security",
        "TrendMicro URL Filter",
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) LinkScanner/2.0",
        "Mozilla/5.0 (Windows NT 5.1; rv:11.0) Gecko Firefox/11.0 (via ggpht.com GoogleImageProxy)",
        "YahooMailProxy; https://help.yahoo.com/kb/yahoo-mail-proxy-SLN28749.html",
    ] {
        assert_eq!(class(ua), UaClass::Bot, "{ua}");
    }
    // Not in the crate's list: without Tidemark's list these would count as people.
    for ua in [
        "Microsoft Office SafeLinks",
        "Barracuda Sentinel (EE)",
        "Mimecast URL Protect",
    ] {
        assert!(!BOTS.is_bot(ua), "{ua}");
    }
}

/// A HEAD request is bot traffic whatever its user agent; no user agent is `unknown`.
#[test]
fn head_requests_are_bots_and_a_missing_agent_is_unknown() {
    let chrome = class(
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36",
    );
    assert!(is_bot_hit(true, chrome));
    assert!(!is_bot_hit(false, chrome));
    assert_eq!(classify_user_agent(None), UaClass::Unknown);
    assert_eq!(classify_user_agent(Some("  ")), UaClass::Unknown);
    assert!(is_bot_hit(true, UaClass::Unknown));
    assert!(!is_bot_hit(false, UaClass::Unknown));
}
