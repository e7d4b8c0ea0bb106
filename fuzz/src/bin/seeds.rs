//! Writes the seed inputs of every fuzz target (`pvfs_fuzz::seeds`) under the
//! directory given: `DIR/TARGET/NAME`. Checks on the way that every request and
//! response kind the decoder knows has a seed, and fails if one has none.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: seeds DIR (writes DIR/TARGET/NAME for every fuzz target)");
        return ExitCode::from(2);
    };
    match pvfs_fuzz::seeds::write_all(&dir) {
        Ok(counts) => {
            for (target, n) in counts {
                println!("seeds: {n:3} for {target}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("seeds: {e}");
            ExitCode::FAILURE
        }
    }
}
