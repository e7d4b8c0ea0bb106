//! Replace-by-rename under readers, for the mount tests: one thread writes new
//! versions of a file to a temporary name and renames each over it (through one
//! mount), while two readers open and read it whole (through the same mount or
//! another).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// What one reader saw: opens that found no file (ENOENT), reads that came back
/// short, other errors, and how many different versions it read whole.
pub type Seen = (usize, usize, Vec<String>, usize);

/// Replaces `name` under `writer` at least 500 times, and until two readers have each
/// read it `opens` times under `reader` (the same directory seen through another mount,
/// or the same one): the number of replacements and what each reader saw.
pub fn replace_while_reading(
    writer: &Path,
    reader: &Path,
    name: &str,
    opens: usize,
) -> (usize, Vec<Seen>) {
    let version = |i: usize| format!("version {i:08}\n").repeat(512).into_bytes();
    let target = writer.join(name);
    std::fs::write(&target, version(0)).unwrap();
    let read_path = reader.join(name);
    // The reader's side sees the first version before the race starts.
    crate::common::poll(
        "the file on the readers' side",
        crate::common::scaled(std::time::Duration::from_secs(10)),
        || {
            std::fs::read(&read_path)
                .ok()
                .filter(|d| d.len() == version(0).len())
        },
    );
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let tmp = writer.join(format!(".{name}.tmp"));
            let mut i = 1;
            while i <= 500 || !done.load(Ordering::Relaxed) {
                std::fs::write(&tmp, version(i)).unwrap();
                std::fs::rename(&tmp, &target).unwrap();
                i += 1;
            }
            i - 1
        });
        let readers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let (mut missing, mut short, mut other) = (0, 0, Vec::new());
                    let mut versions = std::collections::HashSet::new();
                    for _ in 0..opens {
                        match std::fs::read(&read_path) {
                            Ok(d) if d.len() == version(0).len() => {
                                versions.insert(d[..17].to_vec());
                            }
                            Ok(_) => short += 1,
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing += 1,
                            Err(e) => other.push(e.to_string()),
                        }
                    }
                    (missing, short, other, versions.len())
                })
            })
            .collect();
        let seen: Vec<Seen> = readers.into_iter().map(|r| r.join().unwrap()).collect();
        done.store(true, Ordering::Relaxed);
        (writer.join().unwrap(), seen)
    })
}

/// Asserts that every reader read whole versions only (no ENOENT, no short read, no
/// other error) and raced the replacements (it saw more than 10 versions).
pub fn assert_all_whole(opens: usize, renames: usize, seen: &[Seen]) {
    for (missing, short, other, versions) in seen {
        assert!(
            *versions > 10,
            "a reader saw only {versions} versions: the replacements did not race the reads"
        );
        assert_eq!(
            (*missing, *short, other.len()),
            (0, 0, 0),
            "{opens} opens while {renames} renames replaced the file: {missing} ENOENT, \
             {short} short reads, other errors {other:?}"
        );
    }
}
