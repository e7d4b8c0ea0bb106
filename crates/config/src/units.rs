//! Human sizes ("64K", "1.5M") and durations ("500ms", "2s"): parsing and formatting.

use std::time::Duration;

/// Binary size units, smallest first.
const SIZE_UNITS: [(char, u64); 5] = [
    ('K', 1 << 10),
    ('M', 1 << 20),
    ('G', 1 << 30),
    ('T', 1 << 40),
    ('P', 1 << 50),
];

/// Duration units, largest first, in nanoseconds.
const DURATION_UNITS: [(&str, u128); 6] = [
    ("h", 3_600_000_000_000),
    ("m", 60_000_000_000),
    ("s", 1_000_000_000),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];

/// Splits a decimal like "1.25" into a mantissa and a power of ten (125, 100).
fn decimal(s: &str) -> Option<(u128, u128)> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = || int.bytes().chain(frac.bytes());
    if (int.is_empty() && frac.is_empty())
        || frac.len() > 18
        || !digits().all(|c| c.is_ascii_digit())
    {
        return None;
    }
    let mut m: u128 = 0;
    for c in digits() {
        m = m.checked_mul(10)?.checked_add(u128::from(c - b'0'))?;
    }
    Some((m, 10u128.pow(frac.len() as u32)))
}

/// Parses a size: bytes, or a number with K, M, G, T or P (powers of 1024), any case,
/// optionally followed by "B" or "iB": "4096", "64K", "1M", "1.5GiB", "512b".
pub fn parse_size(s: &str) -> Result<u64, String> {
    let bad = || {
        format!(
            "invalid size {s:?} (expected bytes or a number with K, M, G, T or P, e.g. \"64K\")"
        )
    };
    let lower = s.trim().to_ascii_uppercase();
    let mut body = lower.strip_suffix('B').unwrap_or(&lower);
    let mut mult = 1u64;
    if let Some(b) = body.strip_suffix('I') {
        body = b; // "KiB": the "i" must follow a unit letter
        if !SIZE_UNITS.iter().any(|&(c, _)| body.ends_with(c)) {
            return Err(bad());
        }
    }
    if let Some(&(_, m)) = SIZE_UNITS.iter().find(|&&(c, _)| body.ends_with(c)) {
        body = body[..body.len() - 1].trim_end();
        mult = m;
    }
    let (m, scale) = decimal(body).ok_or_else(bad)?;
    let bytes = m
        .checked_mul(u128::from(mult))
        .ok_or_else(|| format!("size {s:?} is too large"))?;
    if bytes % scale != 0 {
        return Err(format!("invalid size {s:?}: not a whole number of bytes"));
    }
    u64::try_from(bytes / scale).map_err(|_| format!("size {s:?} is too large"))
}

/// Formats a size for people: "123", "64K", "1M"; sizes that are not a whole number
/// of their unit get one (rounded) decimal, "1.5G", so only those are approximate.
pub fn format_size(n: u64) -> String {
    for &(c, u) in SIZE_UNITS.iter().rev() {
        if n >= u {
            if n % u == 0 {
                return format!("{}{c}", n / u);
            }
            let tenths = (u128::from(n) * 10 + u128::from(u) / 2) / u128::from(u);
            return format!("{}.{}{c}", tenths / 10, tenths % 10);
        }
    }
    n.to_string()
}

/// Parses a duration: a number with h, m (or min), s, ms, us or ns ("500ms", "2s",
/// "1.5m"), or a bare integer number of milliseconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || {
        format!("invalid duration {s:?} (expected e.g. \"500ms\", \"2s\", \"1m\" or milliseconds)")
    };
    let t = s.trim();
    let (body, mult) = if let Some(b) = t.strip_suffix("min") {
        (b, 60_000_000_000)
    } else {
        // Longest suffix first, so "ms" is not read as "m" + "s".
        let mut units = DURATION_UNITS;
        units.sort_by_key(|(u, _)| std::cmp::Reverse(u.len()));
        match units.iter().find(|(u, _)| t.ends_with(u)) {
            Some((u, m)) => (&t[..t.len() - u.len()], *m),
            None if t.bytes().all(|c| c.is_ascii_digit()) => (t, 1_000_000),
            None => return Err(bad()),
        }
    };
    let (m, scale) = decimal(body.trim_end()).ok_or_else(bad)?;
    let nanos = m
        .checked_mul(mult)
        .ok_or_else(|| format!("duration {s:?} is too long"))?
        / scale;
    let secs =
        u64::try_from(nanos / 1_000_000_000).map_err(|_| format!("duration {s:?} is too long"))?;
    Ok(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}

/// Formats a duration exactly in its largest whole unit: "2s", "1500ms", "1m", "0s".
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    let (u, m) = DURATION_UNITS
        .iter()
        .find(|(_, m)| nanos % m == 0)
        .unwrap_or(&("ns", 1));
    format!("{}{u}", nanos / m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        for (s, n) in [
            ("4096", 4096),
            ("64K", 65536),
            ("64k", 65536),
            ("1M", 1 << 20),
            ("2G", 2 << 30),
            ("1T", 1 << 40),
            ("1.5M", 3 << 19),
            ("512B", 512),
            ("4KiB", 4096),
            ("4 KB", 4096),
            (" 0 ", 0),
        ] {
            assert_eq!(parse_size(s), Ok(n), "{s}");
        }
        for s in [
            "",
            "K",
            "1X",
            "-1",
            "1.5",
            "0.1K",
            "1iB",
            "1e3",
            "1KK",
            "99999999999P",
            "1..5K",
        ] {
            assert!(parse_size(s).is_err(), "{s}");
        }
        for (n, s) in [
            (123, "123"),
            (65536, "64K"),
            (1 << 20, "1M"),
            (3 << 29, "1.5G"),
            (1000, "1000"),
        ] {
            assert_eq!(format_size(n), s);
        }
        assert_eq!(format_size(1_100_000), "1.0M"); // approximate keeps a decimal
    }

    #[test]
    fn durations() {
        let ms = Duration::from_millis;
        for (s, d) in [
            ("500ms", ms(500)),
            ("2s", ms(2000)),
            ("1m", ms(60_000)),
            ("2min", ms(120_000)),
            ("1h", ms(3_600_000)),
            ("1.5s", ms(1500)),
            ("250", ms(250)),
            ("10us", Duration::from_micros(10)),
        ] {
            assert_eq!(parse_duration(s), Ok(d), "{s}");
        }
        for s in ["", "s", "2x", "-1s", "1.5", "ms5"] {
            assert!(parse_duration(s).is_err(), "{s}");
        }
        for (d, s) in [
            (ms(2000), "2s"),
            (ms(1500), "1500ms"),
            (ms(60_000), "1m"),
            (ms(0), "0s"),
        ] {
            assert_eq!(format_duration(d), s);
            assert_eq!(parse_duration(s), Ok(d));
        }
    }
}
