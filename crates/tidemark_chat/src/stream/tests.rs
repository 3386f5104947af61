use super::*;

#[test]
fn the_gap_patience_is_twice_the_recovery_window() {
    assert_eq!(
        gap_patience(Duration::from_secs(30)),
        Duration::from_secs(60)
    );
}

#[test]
fn a_conversation_leaves_the_position_once_settled_under_the_watermark() {
    let conv = |delivered, at, latest, gap| Conv {
        delivered,
        delivered_at_ms: at,
        latest,
        read: 0,
        gap_since: gap,
    };
    // Caught up, last message at or before the watermark.
    assert!(conv(5, Some(1_000), 5, None).settled_by(1_000));
    assert!(conv(0, None, 0, None).settled_by(1_000));
    // Delivered after the watermark, commit time unknown, behind, or waiting at a gap.
    assert!(!conv(5, Some(1_001), 5, None).settled_by(1_000));
    assert!(!conv(5, None, 5, None).settled_by(1_000));
    assert!(!conv(5, Some(10), 6, None).settled_by(1_000));
    assert!(!conv(0, None, 1, None).settled_by(1_000));
    assert!(!conv(5, Some(10), 5, Some(Instant::now())).settled_by(1_000));
}
