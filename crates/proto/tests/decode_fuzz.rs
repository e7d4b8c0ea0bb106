//! Hostile input for every decoder: random bytes, and valid encodings with bytes
//! flipped, cut or appended, must give an error or a value, never a panic or a huge
//! allocation. Runs a bounded number of cases in CI; set `PVFS_FUZZ_CASES` for a
//! longer fuzzing session (`PVFS_FUZZ_CASES=10000000 cargo test --release -p pvfs-proto --test decode_fuzz`).

use proptest::prelude::*;
use pvfs_proto::frame::{FrameHeader, HEADER_LEN};
use pvfs_proto::layout::Layout;
use pvfs_proto::message::ServerInfo;
use pvfs_proto::req;
use pvfs_proto::{
    decode, encode, Attr, CreateWhat, Creds, Datafile, Extent, LayoutSpec, ObjDetail, Regions,
    Request, RequestBody, Response, SetAttr, Stripe, Timespec, Wire,
};

fn samples() -> Vec<Vec<u8>> {
    let attr = Attr {
        handle: 1 << 40,
        mode: 0o644,
        uid: 1,
        gid: 2,
        nlink: 1,
        size: 0,
        atime: Timespec::now(),
        mtime: Timespec::now(),
        ctime: Timespec::now(),
        detail: ObjDetail::File {
            layout: Layout {
                stripe_size: 65536,
                replicas: 1,
                datafiles: vec![Datafile::single(0, 7), Datafile::single(1, 9)],
                width: 2,
            },
        },
        blocks: 0,
        acl: None,
    };
    let cap = pvfs_proto::Capability {
        handle: 9,
        rights: 3,
        uid: 1000,
        expires: 1_800_000_000,
        mac: vec![7; 16],
    };
    let body = |request| {
        encode(&RequestBody {
            creds: Creds {
                uid: 1,
                gid: 2,
                groups: vec![3, 4],
            },
            request,
            retry: None,
            origin: 0,
        })
    };
    vec![
        body(Request::Ping(req::Ping {})),
        body(Request::Lookup(req::Lookup {
            dir: 5,
            name: "name".into(),
            want: 3,
        })),
        body(Request::GetAttr(req::GetAttr {
            handle: 5,
            want: 1,
            proof: Some(cap.clone()),
        })),
        body(Request::SetAttr(req::SetAttr {
            handle: 5,
            set: SetAttr {
                mode: Some(0o600),
                ..Default::default()
            },
        })),
        body(Request::Create(req::Create {
            hold: 0,
            parent: 1,
            name: "f".into(),
            mode: 0o644,
            umask: 0,
            uid: 0,
            gid: 0,
            what: CreateWhat::File {
                spec: LayoutSpec {
                    stripe_size: Some(65536),
                    stripe_count: Some(4),
                    base: None,
                    replicas: None,
                },
            },
        })),
        body(Request::Write(req::Write {
            copies: Default::default(),
            handle: 9,
            stripe: Stripe {
                size: 65536,
                count: 4,
            },
            index: 1,
            regions: Regions::List(vec![
                Extent { offset: 1, len: 2 },
                Extent {
                    offset: 100,
                    len: 7,
                },
            ]),
            sync: false,
            cap: Some(cap.clone()),
        })),
        body(Request::Read(req::Read {
            copies: Default::default(),
            handle: 9,
            stripe: Stripe {
                size: 4096,
                count: 3,
            },
            index: 2,
            regions: Regions::Strided {
                offset: 3,
                block: 10,
                stride: 100,
                start: 5,
                len: 1000,
            },
            cap: None,
        })),
        body(Request::SetXattr(req::SetXattr {
            handle: 5,
            name: "user.x".into(),
            value: vec![1, 2, 3],
            flags: 1,
        })),
        encode(&Response::Attr {
            attr: attr.clone(),
            caps: vec![cap.clone()],
        }),
        encode(&Response::Pong {
            info: ServerInfo {
                name: "s0".into(),
                roles: pvfs_proto::Roles(3),
                fsid: 1,
                version: "0.1.0".into(),
            },
            health: pvfs_proto::message::Health {
                state: pvfs_proto::message::HealthState::Degraded,
                errno: 28,
                reason: "metadata store failed: No space left on device; retrying".into(),
                since_secs: 3,
            },
        }),
        encode(&Response::error(pvfs_proto::Errno::ENOENT, "gone")),
    ]
}

/// Cases per property: 20000 by default, `PVFS_FUZZ_CASES` (decimal, or hex with 0x;
/// at least 1) for a longer session. A value that does not parse or is 0 fails the
/// test: a typo must not silently make it check less.
fn cases() -> u32 {
    let Ok(text) = std::env::var("PVFS_FUZZ_CASES") else {
        return 20_000;
    };
    let t = text.trim();
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => t.parse::<u32>().ok(),
    };
    match parsed {
        Some(n) if n >= 1 => n,
        Some(n) => panic!("PVFS_FUZZ_CASES={text}: {n} is out of range (at least 1)"),
        None => panic!("PVFS_FUZZ_CASES={text} does not parse (decimal, or hex with 0x)"),
    }
}

/// Decodes `bytes` as a `T`: an error is fine; a value must survive a round trip
/// (encoding it and decoding that gives the same value), so a decoder that accepts
/// bytes it cannot stand behind fails here.
fn round_trip<T: Wire + PartialEq + std::fmt::Debug>(bytes: &[u8]) {
    if let Ok(v) = decode::<T>(bytes) {
        let again = encode(&v);
        match decode::<T>(&again) {
            Ok(w) => assert_eq!(w, v, "a decoded value changed over a round trip"),
            Err(e) => panic!("a decoded value does not decode once re-encoded ({e}): {v:?}"),
        }
    }
}

fn decode_all(bytes: &[u8]) {
    round_trip::<RequestBody>(bytes);
    round_trip::<Response>(bytes);
    round_trip::<Attr>(bytes);
    round_trip::<Layout>(bytes);
    round_trip::<Regions>(bytes);
    if bytes.len() >= HEADER_LEN {
        let mut h = [0u8; HEADER_LEN];
        h.copy_from_slice(&bytes[..HEADER_LEN]);
        // A header that decodes encodes back to the same 32 bytes (it has no slack).
        if let Ok(fh) = FrameHeader::decode(&h) {
            assert_eq!(
                FrameHeader::decode(&fh.encode()),
                Ok(fh),
                "frame header round trip"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        decode_all(&bytes);
    }

    #[test]
    fn mutated_encodings_never_panic(
        which in 0usize..10,
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
        tail in proptest::collection::vec(any::<u8>(), 0..16),
    ) {
        let samples = samples();
        let mut bytes = samples[which % samples.len()].clone();
        for (at, x) in flips {
            let i = at.index(bytes.len());
            bytes[i] ^= x;
        }
        decode_all(&bytes);
        let cut = cut.index(bytes.len() + 1);
        decode_all(&bytes[..cut]);
        bytes.extend_from_slice(&tail);
        decode_all(&bytes);
    }

    #[test]
    fn decoded_values_re_encode_identically(which in 0usize..10) {
        // Every sample is a fixed point of decode . encode (the format is canonical).
        let samples = samples();
        let bytes = &samples[which % samples.len()];
        if let Ok(v) = decode::<RequestBody>(bytes) {
            prop_assert_eq!(&encode(&v), bytes);
        } else if let Ok(v) = decode::<Response>(bytes) {
            prop_assert_eq!(&encode(&v), bytes);
        } else {
            prop_assert!(false, "sample {} does not decode", which);
        }
    }
}
