//! The committed `include/pvfs.h` must be exactly what cbindgen generates from the
//! crate now, so the header never drifts from the library. `PVFS_UPDATE_HEADER=1`
//! rewrites it instead of failing (refused under CI, where it must check).

use std::path::Path;

#[test]
fn committed_header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_src(dir.join("src/lib.rs"))
        .with_config(config)
        .generate()
        .expect("cbindgen cannot generate the header")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("header is UTF-8");
    let path = dir.join("include/pvfs.h");
    match std::env::var("PVFS_UPDATE_HEADER").as_deref() {
        Err(_) => {}
        Ok("1") => {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
            assert!(
                !ci,
                "PVFS_UPDATE_HEADER=1 rewrites instead of checking: not under CI"
            );
            std::fs::write(&path, &generated).expect("cannot write include/pvfs.h");
            return;
        }
        Ok(other) => panic!("PVFS_UPDATE_HEADER={other}: set it to 1 to rewrite the header"),
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map_or_else(
                || committed.lines().count().min(generated.lines().count()) + 1,
                |i| i + 1,
            );
        panic!(
            "include/pvfs.h is out of date (first difference at line {line}); \
             regenerate it with PVFS_UPDATE_HEADER=1 cargo test -p pvfs-capi --test header"
        );
    }
}
