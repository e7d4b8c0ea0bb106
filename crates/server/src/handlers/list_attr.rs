//! `ListAttr`: attributes of many objects stored here (readdirplus phase 1).

use pvfs_proto::message::AttrResult;
use pvfs_proto::{req, Changed, Errno, Response};

use crate::error::{OpError, OpResult};
use crate::handlers::answered;
use crate::op::{Access, Answer, Cx, Handler};

/// Most handles one `ListAttr` may ask for.
pub const MAX_LIST: usize = 65536;
/// Encoded bytes of attributes after which a `ListAttr` answer stops (well under the
/// 4 MiB body limit).
pub const ANSWER_BUDGET: usize = 3 << 20;

/// Attributes of many objects from one snapshot, each with its own error, in request
/// order; when they would not fit one answer, a prefix of them.
impl Handler for req::ListAttr {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, handles) = (cx.ctx, self.handles);
        ctx.require_meta()?;
        if handles.len() > MAX_LIST {
            return Err(OpError::invalid(
                Errno::E2BIG,
                format!("ListAttr of {} handles (limit {MAX_LIST})", handles.len()),
            ));
        }
        let view = ctx.meta.read()?;
        let mut attrs = Vec::with_capacity(handles.len());
        let mut bytes = 0usize;
        for &h in &handles {
            if bytes > ANSWER_BUDGET {
                // The rest would not fit one frame: answer a prefix; the client asks
                // again for the handles left over.
                break;
            }
            let result = if !ctx.is_local(h) {
                AttrResult {
                    errno: Errno::ESTALE.0,
                    attr: None,
                }
            } else {
                match answered(&view, h)? {
                    Some(attr) => AttrResult {
                        errno: 0,
                        attr: Some(attr),
                    },
                    None => AttrResult {
                        errno: Errno::ENOENT.0,
                        attr: None,
                    },
                }
            };
            bytes += pvfs_proto::encode(&result).len();
            attrs.push(result);
        }
        Ok(Response::Attrs { attrs }.into())
    }
}
