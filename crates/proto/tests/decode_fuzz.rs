//! Hostile input for every decoder: random bytes, and valid encodings with bytes
//! flipped, cut or appended, must give an error or a value, never a panic or a huge
//! allocation. Runs a bounded number of cases in CI; set `PVFS_FUZZ_CASES` for a
//! longer fuzzing session (`PVFS_FUZZ_CASES=10000000 cargo test --release -p pvfs-proto --test decode_fuzz`).

use proptest::prelude::*;
use pvfs_proto::frame::{FrameHeader, HEADER_LEN};
use pvfs_proto::layout::Layout;
use pvfs_proto::message::ServerInfo;
use pvfs_proto::{
    decode, encode, Attr, CreateWhat, Creds, Datafile, Extent, LayoutSpec, ObjDetail, Regions,
    Request, RequestBody, Response, SetAttr, Stripe, Timespec,
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
                datafiles: vec![
                    Datafile {
                        server: 0,
                        handle: 7,
                    },
                    Datafile {
                        server: 1,
                        handle: 9,
                    },
                ],
            },
        },
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
        })
    };
    vec![
        body(Request::Ping {}),
        body(Request::Lookup {
            dir: 5,
            name: "name".into(),
        }),
        body(Request::SetAttr {
            handle: 5,
            set: SetAttr {
                mode: Some(0o600),
                ..Default::default()
            },
        }),
        body(Request::Create {
            parent: 1,
            name: "f".into(),
            mode: 0o644,
            uid: 0,
            gid: 0,
            what: CreateWhat::File {
                spec: LayoutSpec {
                    stripe_size: Some(65536),
                    stripe_count: Some(4),
                    base: None,
                },
            },
        }),
        body(Request::Write {
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
        }),
        body(Request::Read {
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
        }),
        body(Request::SetXattr {
            handle: 5,
            name: "user.x".into(),
            value: vec![1, 2, 3],
            flags: 1,
        }),
        encode(&Response::Attr { attr: attr.clone() }),
        encode(&Response::Pong {
            info: ServerInfo {
                name: "s0".into(),
                roles: pvfs_proto::Roles(3),
                fsid: 1,
                version: "0.1.0".into(),
            },
        }),
        encode(&Response::error(pvfs_proto::Errno::ENOENT, "gone")),
    ]
}

/// Cases per property: 20000 in CI, `PVFS_FUZZ_CASES` for a longer session.
fn cases() -> u32 {
    std::env::var("PVFS_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

fn decode_all(bytes: &[u8]) {
    let _ = decode::<RequestBody>(bytes);
    let _ = decode::<Response>(bytes);
    let _ = decode::<Attr>(bytes);
    let _ = decode::<Layout>(bytes);
    let _ = decode::<Regions>(bytes);
    if bytes.len() >= HEADER_LEN {
        let mut h = [0u8; HEADER_LEN];
        h.copy_from_slice(&bytes[..HEADER_LEN]);
        let _ = FrameHeader::decode(&h);
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
