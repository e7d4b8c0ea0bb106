//! The wire values the `wire_values` target decodes, besides request and response
//! bodies: everything else that arrives from a peer or a disk in the codec's format.
//! One table, so the target and its seeds name the same types in the same order.

use pvfs_proto::acl::Acl;
use pvfs_proto::handshake::{HandshakeMsg, MungePayload};
use pvfs_proto::layout::Layout;
use pvfs_proto::{
    Attr, Capability, Creds, DirEntry, LayoutSpec, ObjDetail, Regions, SetAttr, Wire,
};

use crate::{round_trip, round_trip_upgrading};

/// One type: its name, the check of one input, and how its seed is found.
pub struct WireType {
    /// The type, for seed names.
    pub name: &'static str,
    /// Decodes the input and checks what it gives.
    pub check: fn(&[u8]),
    /// The first valid encoding ([`crate::seeds::first_valid`]).
    pub seed: fn() -> Option<Vec<u8>>,
}

fn exact<T: Wire + PartialEq + std::fmt::Debug>(bytes: &[u8]) {
    round_trip::<T>(bytes);
}

fn upgrading<T: Wire + PartialEq + std::fmt::Debug>(bytes: &[u8]) {
    round_trip_upgrading::<T>(bytes);
}

fn layout(bytes: &[u8]) {
    if let Some(l) = round_trip_upgrading::<Layout>(bytes) {
        assert!(l.validate().is_ok(), "a decoded layout is invalid: {l:?}");
    }
}

fn regions(bytes: &[u8]) {
    if let Some(r) = round_trip::<Regions>(bytes) {
        assert!(r.validate().is_ok(), "decoded regions are invalid: {r:?}");
    }
}

/// A layout must pass `Layout::validate`, which no string of zeros does: one
/// datafile, 64 KiB stripes.
fn layout_seed() -> Option<Vec<u8>> {
    Some(pvfs_proto::encode(&crate::seeds::layout()))
}

fn first<T: Wire>() -> Option<Vec<u8>> {
    crate::seeds::first_valid::<T>(&[])
}

/// The types, in the order the target's first input byte picks them.
pub const TYPES: &[WireType] = &[
    WireType {
        name: "Capability",
        check: exact::<Capability>,
        seed: first::<Capability>,
    },
    WireType {
        name: "Capabilities",
        check: exact::<Vec<Capability>>,
        seed: first::<Vec<Capability>>,
    },
    WireType {
        name: "Attr",
        check: upgrading::<Attr>,
        seed: first::<Attr>,
    },
    WireType {
        name: "ObjDetail",
        check: upgrading::<ObjDetail>,
        seed: first::<ObjDetail>,
    },
    WireType {
        name: "Layout",
        check: layout,
        seed: layout_seed,
    },
    WireType {
        name: "Regions",
        check: regions,
        seed: first::<Regions>,
    },
    WireType {
        name: "Acl",
        check: exact::<Acl>,
        seed: first::<Acl>,
    },
    WireType {
        name: "HandshakeMsg",
        check: exact::<HandshakeMsg>,
        seed: first::<HandshakeMsg>,
    },
    WireType {
        name: "MungePayload",
        check: exact::<MungePayload>,
        seed: first::<MungePayload>,
    },
    WireType {
        name: "Creds",
        check: exact::<Creds>,
        seed: first::<Creds>,
    },
    WireType {
        name: "SetAttr",
        check: exact::<SetAttr>,
        seed: first::<SetAttr>,
    },
    WireType {
        name: "LayoutSpec",
        check: exact::<LayoutSpec>,
        seed: first::<LayoutSpec>,
    },
    WireType {
        name: "DirEntries",
        check: exact::<Vec<DirEntry>>,
        seed: first::<Vec<DirEntry>>,
    },
];
