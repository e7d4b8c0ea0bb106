//! How fast the block sums are: CRC32C of 1 GiB in 4 KiB blocks with
//! `pvfs_storage::sums::block_sum` (`crc-fast`) and with the `crc32c` crate, three
//! rounds each (`docs/benchmarks/2026-11-30-checksums.md`).
//!
//!     cargo run --release -p pvfs-storage --example sum_speed

use std::time::Instant;

use pvfs_storage::sums::{block_sum, SUM_BLOCK};

fn main() {
    let buf: Vec<u8> = (0..4usize << 20).map(|i| (i * 31 % 251) as u8).collect();
    let rounds = 256; // 256 x 4 MiB = 1 GiB
    let gb_per_sec = |secs: f64| (rounds * buf.len()) as f64 / secs / 1e9;
    for round in 1..=3 {
        let (mut a, mut b) = (0u32, 0u32);
        let t = Instant::now();
        for _ in 0..rounds {
            for block in buf.chunks(SUM_BLOCK as usize) {
                a ^= block_sum(block);
            }
        }
        let fast = gb_per_sec(t.elapsed().as_secs_f64());
        let t = Instant::now();
        for _ in 0..rounds {
            for block in buf.chunks(SUM_BLOCK as usize) {
                b ^= crc32c::crc32c(block);
            }
        }
        let plain = gb_per_sec(t.elapsed().as_secs_f64());
        assert_eq!(a, b, "the two must compute the same CRC32C");
        println!(
            "round {round}: block_sum (crc-fast) {fast:.1} GB/s, crc32c crate {plain:.1} GB/s"
        );
    }
}
