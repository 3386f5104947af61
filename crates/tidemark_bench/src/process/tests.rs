use std::ffi::OsString;

use super::*;

/// A directory with an executable-looking file `name` in it.
fn dir_with(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(name), b"#!/bin/sh\n").unwrap();
    dir
}

fn path_of(dirs: &[&Path]) -> OsString {
    std::env::join_paths(dirs).unwrap()
}

#[test]
fn the_flag_wins_over_the_sibling_and_path() {
    let sibling = dir_with(SERVER_EXE);
    let other = dir_with("my-build");
    let flag = ServerBin {
        server_bin: Some(other.path().join("my-build")),
    };
    let own = sibling.path().join("tidemark-bench");
    let on_path = path_of(&[sibling.path()]);
    let got = flag.resolve_from(Some(&own), Some(&on_path)).unwrap();
    assert_eq!(got, other.path().join("my-build"));
}

#[test]
fn a_flag_naming_no_file_is_refused() {
    let flag = ServerBin {
        server_bin: Some(PathBuf::from("/nonexistent/tidemark")),
    };
    let err = flag.resolve_from(None, None).unwrap_err().to_string();
    assert_eq!(err, "--server-bin /nonexistent/tidemark: no such file");
}

#[test]
fn the_default_is_the_sibling_then_path() {
    let sibling = dir_with(SERVER_EXE);
    let elsewhere = dir_with(SERVER_EXE);
    let empty = tempfile::tempdir().unwrap();
    let on_path = path_of(&[empty.path(), elsewhere.path()]);
    let default = ServerBin::default();

    let own = sibling.path().join("tidemark-bench");
    let got = default.resolve_from(Some(&own), Some(&on_path)).unwrap();
    assert_eq!(got, sibling.path().join(SERVER_EXE));

    let own = empty.path().join("tidemark-bench");
    let got = default.resolve_from(Some(&own), Some(&on_path)).unwrap();
    assert_eq!(got, elsewhere.path().join(SERVER_EXE));
}

#[test]
fn without_either_the_error_names_both_places() {
    let empty = tempfile::tempdir().unwrap();
    let own = empty.path().join("tidemark-bench");
    let on_path = path_of(&[empty.path()]);
    let err = ServerBin::default()
        .resolve_from(Some(&own), Some(&on_path))
        .unwrap_err()
        .to_string();
    let beside = empty.path().join(SERVER_EXE);
    assert!(
        err.contains(&format!(
            "none beside tidemark-bench ({})",
            beside.display()
        )),
        "{err}"
    );
    assert!(err.contains("none on PATH"), "{err}");
    assert!(err.contains("--server-bin PATH"), "{err}");
}
