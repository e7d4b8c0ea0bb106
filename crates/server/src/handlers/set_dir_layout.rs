//! `SetDirLayout`: sets or clears the default layout of new files in a directory.

use pvfs_proto::{req, Changed, Errno, Response};

use crate::error::{OpError, OpResult};
use crate::feed::object;
use crate::handlers::{change_dir, create::check_spec};
use crate::op::{Access, Answer, Cx, Handler};

/// Stores `layout` as `dir`'s default (owner or root only).
impl Handler for req::SetDirLayout {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        vec![object(self.dir)]
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, dir, layout) = (cx.ctx, self.dir, self.layout);
        ctx.require_meta()?;
        ctx.require_local(dir)?;
        if let Some(spec) = layout {
            check_spec(ctx, spec)?;
        }
        let uid = cx.caller.creds.uid;
        let answer = cx
            .once
            .commit(&ctx.meta, move |t| {
                let attr = change_dir(t, dir, |owner, _, default_layout| {
                    if uid != 0 && uid != owner {
                        return Err(OpError::denied(
                            Errno::EPERM,
                            "only the owner or root may set a directory's layout",
                        ));
                    }
                    *default_layout = layout;
                    Ok(())
                })?;
                Ok(Response::Attr {
                    attr,
                    caps: Vec::new(),
                })
            })
            .await?;
        Ok(answer.into())
    }
}
