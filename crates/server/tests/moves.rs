//! A rename across servers is two steps: the new name (`LinkEntry`), then the removal
//! of the old one. If only the first happens (a crash between), the file has two
//! names. With the new name counted as a link (`counted`), that is a proper hard link:
//! removing either name leaves the file to the other. Found by the simulator: with the
//! new name uncounted, removing the old name later deleted the file under the new one.
#![allow(clippy::unwrap_used)]

use pvfs_proto::message::UnlinkWant;
use pvfs_proto::{req, CreateWhat, Creds, LayoutSpec, LinkDrop, ObjKind, Request, Response};
use pvfs_server::local::LocalServer;

async fn create(s: &LocalServer, root: u64, name: &str) -> u64 {
    let file = CreateWhat::File {
        spec: LayoutSpec::default(),
    };
    let r = LocalServer::create_request(root, name, file);
    match s.call(Creds::default(), r, None).await.unwrap() {
        Response::Created { attr, .. } => attr.handle,
        other => panic!("{other:?}"),
    }
}

/// The first step of a move of `from` to `to`, the second never happening, then the
/// removal of the old name: whether the file is still there under the new one.
async fn interrupted_move_then_unlink(
    s: &LocalServer,
    root: u64,
    tag: &str,
    counted: bool,
) -> bool {
    let (from, to) = (format!("{tag}-from"), format!("{tag}-to"));
    let h = create(s, root, &from).await;
    let link = Request::LinkEntry(req::LinkEntry {
        dir: root,
        name: to.clone(),
        handle: h,
        kind: ObjKind::File,
        replace: None,
        fate: LinkDrop::Delete,
        counted,
        ticket: None,
    });
    s.call(Creds::default(), link, None).await.unwrap();
    let nlink = s
        .ctx
        .meta
        .read()
        .unwrap()
        .get_object(h)
        .unwrap()
        .unwrap()
        .nlink;
    assert_eq!(nlink, if counted { 2 } else { 1 }, "{tag}");
    let unlink = Request::Unlink(req::Unlink {
        dir: root,
        name: from,
        expect: Some(h),
        want: UnlinkWant::NotDir,
        fate: LinkDrop::Delete,
    });
    s.call(Creds::default(), unlink, None).await.unwrap();
    let view = s.ctx.meta.read().unwrap();
    assert_eq!(
        view.get_entry(root, &to).unwrap().map(|e| e.0),
        Some(h),
        "{tag}"
    );
    view.get_object(h).unwrap().is_some()
}

#[tokio::test]
async fn a_counted_new_name_keeps_the_file_when_the_old_one_goes() {
    let dir = tempfile::tempdir().unwrap();
    let config = LocalServer::configure(dir.path(), 1).unwrap();
    let root = config.root_handle();
    let s = LocalServer::open(config, "s0").await.unwrap();
    assert!(
        interrupted_move_then_unlink(&s, root, "counted", true).await,
        "a counted second name keeps the file"
    );
    // Negative control: the uncounted name (how a directory still moves, and how
    // files moved before) loses its object.
    assert!(
        !interrupted_move_then_unlink(&s, root, "uncounted", false).await,
        "without the count the file goes with its old name: the test could not fail"
    );
    s.close().await;
}
