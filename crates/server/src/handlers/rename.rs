//! `Rename`: moves an entry in one commit when both names' shards are on this server.

use pvfs_proto::access::{self, MAY_WRITE};
use pvfs_proto::types::check_name;
use pvfs_proto::{req, Changed, Errno, Response, Timespec};

use crate::error::{OpError, OpResult};
use crate::feed::{entry, object};
use crate::handlers::link_entry::{finish_replaced, linked, put_entry};
use crate::handlers::sealed;
use crate::handlers::{changed, lookup, no_entry};
use crate::op::{Access, Answer, Cx, Handler};
use crate::perms::attrs_of;

/// Moves `src_dir/src_name` (which must name `expect_src`) to `dst_dir/dst_name`,
/// replacing `replace` there if given. The caller needs to be allowed to remove the
/// source name and any name it replaces (write and search permission, the sticky
/// rule) and to add names to the destination; a directory moved to another parent
/// also needs write permission on itself. Kind checks (file over directory,
/// emptiness) were done by the client, which sealed a replaced directory first.
impl Handler for req::Rename {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        let mut v = vec![
            entry(self.src_dir, &self.src_name),
            entry(self.dst_dir, &self.dst_name),
            object(self.expect_src),
        ];
        v.extend(self.replace.map(object));
        v
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, caller) = (cx.ctx, cx.caller);
        ctx.require_meta()?;
        let m = self;
        check_name(&m.dst_name)
            .map_err(|e| OpError::invalid(e, format!("invalid name {:?}", m.dst_name)))?;
        let c = &caller.creds;
        let src_attr = lookup::change(ctx, caller, m.src_dir).await?;
        let dst_attr = if m.dst_dir == m.src_dir {
            src_attr.clone()
        } else {
            lookup::change(ctx, caller, m.dst_dir).await?
        };
        lookup::check_placement(ctx, &src_attr, &m.src_name)?;
        lookup::check_placement(ctx, &dst_attr, &m.dst_name)?;
        let moved = attrs_of(ctx, m.expect_src).await?;
        let denied = |e: Errno, what: String| OpError::denied(e, what);
        access::may_delete(&src_attr, moved.uid, c)
            .map_err(|e| denied(e, format!("no permission to move {:?}", m.src_name)))?;
        if let Some(r) = m.replace {
            let replaced = attrs_of(ctx, r).await?;
            access::may_delete(&dst_attr, replaced.uid, c)
                .map_err(|e| denied(e, format!("no permission to replace {:?}", m.dst_name)))?;
        }
        if moved.is_dir() && m.src_dir != m.dst_dir {
            access::check(&moved, c, MAY_WRITE).map_err(|e| {
                denied(
                    e,
                    format!(
                        "no write permission on directory {:?} to move it",
                        m.src_name
                    ),
                )
            })?;
        }
        let req::Rename {
            src_dir,
            src_name,
            dst_dir,
            dst_name,
            expect_src,
            replace,
            fate,
        } = m;
        // Kept until the commit ended (`crate::holds`).
        let claims = crate::holds::Claims::new(&ctx.holds);
        let owner = (ctx.caps.clone(), claims.clone(), ctx.here());
        let uid = caller.creds.uid;
        let admission = sealed::gate(ctx, dst_dir).await?;
        let mut response = cx
            .once
            .commit(&ctx.meta, move |t| {
                let (handle, kind) = t
                    .get_entry(src_dir, &src_name)?
                    .ok_or_else(|| no_entry(src_dir, &src_name))?;
                if handle != expect_src {
                    return Err(changed(src_dir, &src_name));
                }
                admission.check(t)?;
                let changed = Timespec::now();
                t.delete_entry(src_dir, &src_name, changed)?;
                let replaced = put_entry(t, dst_dir, &dst_name, handle, kind, replace, changed)?;
                linked(
                    t,
                    (&owner.0, &*owner.1, owner.2),
                    (replaced, fate, uid),
                    changed,
                )
            })
            .await?;
        finish_replaced(ctx, caller, fate, cx.once.peer_key(), &mut response).await?;
        Ok(response.into())
    }

    /// A retry takes the replaced object's link at its owner again if the first run
    /// could not (the same key: it happens once).
    async fn replayed(self, cx: Cx<'_>, mut recorded: Response) -> OpResult<Answer> {
        let key = cx.once.peer_key();
        finish_replaced(cx.ctx, cx.caller, self.fate, key, &mut recorded).await?;
        Ok(recorded.into())
    }
}
