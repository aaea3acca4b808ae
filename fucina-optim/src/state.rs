//! Optimizer state as safetensors: every moment a tensor named
//! `state.{group}.{param}.{buffer}`, and one metadata entry `fucina_optim`
//! holding JSON (optimizer name, global step, per-group config and schedule,
//! per-parameter shape, dtype, step count and buffer names).
//!
//! Loading validates everything (optimizer, group and parameter counts,
//! shapes, dtypes, buffer names, element counts) into a fresh state first and
//! swaps it in only when all of it fits: a failed load changes nothing.
//!
//! This module owns the state I/O and the per-parameter [`ParamState`]; it
//! sees an optimizer only as its groups (`GroupView`) and hands a load back
//! as a `Loaded` for [`Optim`](crate::Optim) to commit, so it never names
//! the optimizer module (which calls it).

use std::collections::HashMap;

use fucina_autograd::io::{st_name, SafetensorsFile};
use fucina_autograd::Tensor;
use safetensors::tensor::TensorView;
use serde::{Deserialize, Serialize};

use crate::algo::Algorithm;
use crate::error::{Error, Result};
use crate::kernel::Buf;
use crate::schedule::Schedule;

/// The state of one parameter: its step count and its buffers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ParamState {
    /// Updates applied to this parameter so far.
    pub step: u64,
    /// The buffers, in [`Algorithm::buffers`] order (empty before the first update).
    pub bufs: Vec<Buf>,
}

/// One parameter group as the state file sees it.
pub(crate) struct GroupView<'a, A> {
    /// The group's hyperparameters.
    pub config: &'a A,
    /// The group's schedule.
    pub schedule: Schedule,
    /// The group's parameters.
    pub params: &'a [Tensor],
    /// Their states, one per parameter.
    pub state: &'a [ParamState],
}

/// A state file validated against an optimizer's parameters, ready to commit.
pub(crate) struct Loaded<A> {
    /// Per group: the saved config and schedule.
    pub groups: Vec<(A, Schedule)>,
    /// Per group, per parameter: the saved state.
    pub state: Vec<Vec<ParamState>>,
    /// The global step count.
    pub steps: u64,
}

/// What names optimizer state bytes in header errors.
const STATE_LABEL: &str = "<optimizer state>";

/// The metadata key of the optimizer description.
pub const METADATA_KEY: &str = "fucina_optim";
const FORMAT: u32 = 1;

#[derive(Serialize, Deserialize)]
struct Meta<C> {
    format: u32,
    optimizer: String,
    step: u64,
    groups: Vec<GroupMeta<C>>,
}

#[derive(Serialize, Deserialize)]
struct GroupMeta<C> {
    config: C,
    schedule: Schedule,
    params: Vec<ParamMeta>,
}

#[derive(Serialize, Deserialize)]
struct ParamMeta {
    shape: Vec<usize>,
    dtype: String,
    step: u64,
    buffers: Vec<String>,
}

fn tensor_name(g: usize, p: usize, buf: &str) -> String {
    format!("state.{g}.{p}.{buf}")
}

/// The state file of an optimizer at global step `steps` over `groups`.
pub(crate) fn to_bytes<A: Algorithm>(steps: u64, groups: &[GroupView<'_, A>]) -> Result<Vec<u8>> {
    let mut metas = Vec::with_capacity(groups.len());
    let mut views: Vec<(String, TensorView<'_>)> = Vec::new();
    for (gi, g) in groups.iter().enumerate() {
        let mut params = Vec::with_capacity(g.params.len());
        for (pi, p) in g.params.iter().enumerate() {
            let st = g
                .state
                .get(pi)
                .ok_or_else(|| Error::StateMismatch(format!("group {gi} param {pi}: no state")))?;
            let specs = if st.bufs.is_empty() {
                Vec::new()
            } else {
                g.config.buffers(p.shape(), p.dtype())
            };
            if specs.len() != st.bufs.len() {
                return Err(Error::StateMismatch(format!(
                    "group {gi} param {pi}: {} buffers, config says {}",
                    st.bufs.len(),
                    specs.len()
                )));
            }
            for ((name, _), b) in specs.iter().zip(&st.bufs) {
                let view = TensorView::new(st_name(b.dtype()), p.shape().to_vec(), b.bytes())?;
                views.push((tensor_name(gi, pi, name), view));
            }
            params.push(ParamMeta {
                shape: p.shape().to_vec(),
                dtype: p.dtype().name().to_string(),
                step: st.step,
                buffers: specs.iter().map(|(n, _)| n.to_string()).collect(),
            });
        }
        metas.push(GroupMeta {
            config: g.config.clone(),
            schedule: g.schedule,
            params,
        });
    }
    let meta = Meta {
        format: FORMAT,
        optimizer: A::NAME.to_string(),
        step: steps,
        groups: metas,
    };
    let mut md = HashMap::new();
    md.insert(METADATA_KEY.to_string(), serde_json::to_string(&meta)?);
    Ok(safetensors::serialize(views, &Some(md))?)
}

/// Reads and validates a state file for an optimizer whose groups hold
/// `params`; nothing is committed (see [`Loaded`]).
pub(crate) fn load_bytes<A: Algorithm>(bytes: &[u8], params: &[&[Tensor]]) -> Result<Loaded<A>> {
    // The workspace's one safetensors reader, with its strict header check (a
    // key named twice, which the safetensors crate resolves as "last wins", is
    // an error).
    let st = SafetensorsFile::from_bytes(STATE_LABEL, bytes)?;
    let md = st.metadata().get(METADATA_KEY).ok_or_else(|| {
        Error::StateMismatch(format!(
            "no `{METADATA_KEY}` metadata: not an optimizer state file"
        ))
    })?;
    let value: serde_json::Value = serde_json::from_str(md)?;
    let saved = value
        .get("optimizer")
        .and_then(|v| v.as_str())
        .unwrap_or("?");
    if saved != A::NAME {
        return Err(Error::StateMismatch(format!(
            "state of optimizer `{saved}` loaded into `{}`",
            A::NAME
        )));
    }
    let meta: Meta<A> = serde_json::from_value(value)?;
    if meta.format != FORMAT {
        return Err(Error::StateMismatch(format!(
            "state format {} (this build reads {FORMAT})",
            meta.format
        )));
    }
    if meta.optimizer != A::NAME {
        return Err(Error::StateMismatch(format!(
            "state of optimizer `{}` loaded into `{}`",
            meta.optimizer,
            A::NAME
        )));
    }
    if meta.groups.len() != params.len() {
        return Err(Error::StateMismatch(format!(
            "{} param groups saved, optimizer has {}",
            meta.groups.len(),
            params.len()
        )));
    }
    let mut new_state = Vec::with_capacity(meta.groups.len());
    let mut used = 0usize;
    for (gi, (gm, g_params)) in meta.groups.iter().zip(params).enumerate() {
        gm.config.validate()?;
        gm.schedule.validate()?;
        if gm.params.len() != g_params.len() {
            return Err(Error::StateMismatch(format!(
                "group {gi}: {} params saved, optimizer has {}",
                gm.params.len(),
                g_params.len()
            )));
        }
        let mut states = Vec::with_capacity(g_params.len());
        for (pi, (pm, p)) in gm.params.iter().zip(g_params.iter()).enumerate() {
            if pm.shape != p.shape() || pm.dtype != p.dtype().name() {
                return Err(Error::StateMismatch(format!(
                    "group {gi} param {pi}: saved {:?} {}, parameter is {:?} {}",
                    pm.shape,
                    pm.dtype,
                    p.shape(),
                    p.dtype()
                )));
            }
            let specs = if pm.buffers.is_empty() {
                Vec::new()
            } else {
                gm.config.buffers(p.shape(), p.dtype())
            };
            let names: Vec<&str> = specs.iter().map(|(n, _)| *n).collect();
            if names != pm.buffers.iter().map(String::as_str).collect::<Vec<_>>() {
                return Err(Error::StateMismatch(format!(
                    "group {gi} param {pi}: buffers {:?}, config expects {names:?}",
                    pm.buffers
                )));
            }
            if pm.step == 0 && !specs.is_empty() {
                return Err(Error::StateMismatch(format!(
                    "group {gi} param {pi}: buffers without a step"
                )));
            }
            let mut bufs = Vec::with_capacity(specs.len());
            for (name, dt) in specs {
                let tn = tensor_name(gi, pi, name);
                let info = st
                    .info(&tn)
                    .ok_or_else(|| Error::StateMismatch(format!("missing tensor `{tn}`")))?;
                if info.dtype != Some(dt) || info.shape != p.shape() {
                    return Err(Error::StateMismatch(format!(
                        "`{tn}`: {} {:?}, expected {dt} {:?}",
                        info.dtype_name,
                        info.shape,
                        p.shape()
                    )));
                }
                let data = st.bytes(&tn)?;
                if data.len() != p.numel().saturating_mul(dt.size_of()) {
                    return Err(Error::StateMismatch(format!("`{tn}`: bad byte length")));
                }
                let b = Buf::from_bytes(p.ctx(), dt, data)?;
                bufs.push(b);
                used += 1;
            }
            states.push(ParamState {
                step: pm.step,
                bufs,
            });
        }
        new_state.push(states);
    }
    if used != st.len() {
        return Err(Error::StateMismatch(format!(
            "{} tensors in the file, {used} expected",
            st.len()
        )));
    }
    Ok(Loaded {
        groups: meta
            .groups
            .into_iter()
            .map(|gm| (gm.config, gm.schedule))
            .collect(),
        state: new_state,
        steps: meta.step,
    })
}
