//! `Widen`: lets a regular file's bytes reach more of its datafiles. A file starts
//! 1 datafile wide; a client widens it here before a write, truncate or
//! preallocation puts bytes past its width, so that sizes need to ask only the
//! datafiles within it (the layout's invariant: the others are empty).

use pvfs_proto::{req, rights, Attr, Changed, Errno, ObjDetail, Response};

use crate::error::{OpError, OpResult};
use crate::feed::object;
use crate::handlers::{local_object, no_object};
use crate::op::{Access, Answer, Cx, Handler};

/// Widens file `handle` to at least `width` datafiles (at most all of them; never
/// narrower) and answers its attributes. A file already that wide costs no commit;
/// the width only grows, so a retry is harmless.
impl Handler for req::Widen {
    fn access(&self) -> Access<'_> {
        Access::Capability {
            cap: self.cap.as_ref(),
            handle: self.handle,
            rights: rights::WRITE,
            copies: &[],
        }
    }

    fn changes(&self) -> Vec<Changed> {
        vec![object(self.handle)]
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, handle, width) = (cx.ctx, self.handle, self.width);
        let attr = local_object(ctx, handle)?;
        if !narrower(&attr, width)? {
            return Ok(Response::Attr {
                attr,
                caps: Vec::new(),
            }
            .into());
        }
        let attr = ctx
            .commit(move |t| {
                let mut attr = t.get_object(handle)?.ok_or_else(|| no_object(handle))?;
                if narrower(&attr, width)? {
                    if let ObjDetail::File { layout } = &mut attr.detail {
                        layout.width = width;
                    }
                    // No time changes: which datafiles may hold bytes is not something
                    // POSIX shows (the write that follows sets the file's times).
                    t.put_object(&attr);
                }
                Ok(attr)
            })
            .await?;
        Ok(Response::Attr {
            attr,
            caps: Vec::new(),
        }
        .into())
    }
}

/// Whether file `attr` is narrower than `width`; EINVAL when it is no regular file or
/// has fewer datafiles than that.
fn narrower(attr: &Attr, width: u32) -> OpResult<bool> {
    let ObjDetail::File { layout } = &attr.detail else {
        return Err(OpError::invalid(
            Errno::EINVAL,
            format!(
                "{:#x} is not a regular file: it has no datafiles to widen to",
                attr.handle
            ),
        ));
    };
    if width == 0 || width as usize > layout.datafiles.len() {
        return Err(OpError::invalid(
            Errno::EINVAL,
            format!(
                "width {width} for a file of {} datafiles",
                layout.datafiles.len()
            ),
        ));
    }
    Ok(layout.width < width)
}
