//! The text a node reads from its disk: the configuration file (`pvfs_config`), key
//! files (`pvfs_auth::KeyRing`), and the sizes and durations written in them. The
//! first byte picks the format; the rest, if it is UTF-8, must parse to an error or
//! to a value that is written back as text parsing to the same value (a size to one
//! within the rounding its format for people allows).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pvfs_auth::KeyRing;
use pvfs_config::{format_duration, format_size, parse_duration, parse_size, Config};

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    match which % 4 {
        0 => {
            if let Ok(config) = Config::parse(text, "fuzz.toml") {
                let again = Config::parse(&config.to_toml(), "written")
                    .unwrap_or_else(|e| panic!("a written configuration does not parse: {e}"));
                assert_eq!(
                    again, config,
                    "a configuration changed when written and read"
                );
            }
        }
        1 => {
            if let Ok(ring) = KeyRing::parse(text, "fuzz.key") {
                let again = KeyRing::parse(&ring.to_text("fuzz"), "written")
                    .unwrap_or_else(|e| panic!("a written key file does not parse: {e}"));
                let ids = |r: &KeyRing| r.keys().iter().map(|k| *k.id()).collect::<Vec<_>>();
                assert_eq!(
                    ids(&again),
                    ids(&ring),
                    "keys changed when written and read"
                );
            }
        }
        2 => {
            // Sizes are formatted for people: exactly in a whole unit, else with one
            // rounded decimal ("1.5G"), within a twentieth of the size.
            if let Ok(n) = parse_size(text) {
                let shown = format_size(n);
                match parse_size(&shown) {
                    Ok(back) if !shown.contains('.') => assert_eq!(back, n, "{shown}"),
                    Ok(back) => assert!(back.abs_diff(n) <= n / 20, "{n} shown as {shown}"),
                    Err(e) => assert!(shown.contains('.'), "{n} shown as {shown}: {e}"),
                }
            }
        }
        _ => {
            if let Ok(d) = parse_duration(text) {
                assert_eq!(parse_duration(&format_duration(d)), Ok(d), "duration {d:?}");
            }
        }
    }
});
