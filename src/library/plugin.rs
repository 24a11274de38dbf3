//! Module types this runtime does not read itself: a plug-in (a library written against upstream's
//! C++ headers, loaded into the process) registers `runtime.module.loadbinary_<type key>` and
//! `runtime.module.loadfile_<format>` as upstream's own module types do, and this runtime asks the
//! registry for them as upstream does. A blob loader gets what upstream's get: a `dmlc::Stream*`
//! over the module blob whose every read advances this runtime's reader, so what a loader consumed
//! is where the next entry starts.

use crate::cxx_abi::{tvmrt_cxx_read_stream_free, tvmrt_cxx_read_stream_new};
use crate::error::{Error, Result};
use crate::module::Module;
use crate::object::ObjRef;
use crate::packed::{registry, ArgsBuilder, RetValue};
use crate::stream::Reader;
use std::ffi::c_void;

/// `tvmrt.LoadPlugin(path)`: loads a plug-in for the life of the process (see
/// `symbols::load_plugin`); loading one again does nothing more.
pub fn load_plugin(path: &str) -> Result<()> {
    let resolved = crate::files::existing_file(std::path::Path::new(path))?;
    let resolved = resolved.to_str().ok_or_else(|| Error::value(format!("'{path}' is not UTF-8")))?;
    super::symbols::load_plugin(resolved).map_err(|e| e.context(format!("loading the plug-in '{path}'")))
}

/// The plug-ins `TVMRT_PLUGINS` names (paths separated by `:`), loaded once, before the first
/// model: for hosts that cannot pass a flag or make a call. Their failure is every load's.
pub fn load_plugins_from_env() -> Result<()> {
    static LOADED: once_cell::sync::OnceCell<std::result::Result<(), String>> = once_cell::sync::OnceCell::new();
    LOADED
        .get_or_init(|| {
            let Some(list) = std::env::var_os("TVMRT_PLUGINS") else { return Ok(()) };
            let list = list.to_string_lossy().into_owned();
            for path in list.split(':').filter(|p| !p.is_empty()) {
                load_plugin(path).map_err(|e| format!("TVMRT_PLUGINS: {}", e.to_c_message()))?;
            }
            Ok(())
        })
        .clone()
        .map_err(Error::value)
}

/// The registry's loader of modules of type `key` from a blob, or `None` when nothing registered
/// one.
pub fn load_binary(key: &str, r: &mut Reader<'_>) -> Option<Result<ObjRef<Module>>> {
    let loader = registry::get(&format!("runtime.module.loadbinary_{key}"))?;
    let start = r.pos();
    let mut ctx: &mut Reader<'_> = r;
    // SAFETY: the stream calls `read_into` with `ctx`, which outlives it (freed below).
    let stream = unsafe { tvmrt_cxx_read_stream_new(read_into, (&mut ctx as *mut &mut Reader<'_>).cast()) };
    if stream.is_null() {
        return Some(Err(Error::internal("out of memory making a blob stream")));
    }
    let mut args = ArgsBuilder::new();
    // SAFETY: the loader takes the handle as upstream's loaders do: a `dmlc::Stream*`, alive for
    // the call.
    unsafe { args.handle(stream) };
    let rv = loader.call(&args.args());
    // SAFETY: made above, freed once, after the only call that uses it.
    unsafe { tvmrt_cxx_read_stream_free(stream) };
    let read = ctx.pos() - start;
    Some(
        rv.and_then(|rv| into_module(rv, &format!("runtime.module.loadbinary_{key}")))
            .map_err(|e| e.context(format!("the loader of '{key}' (having read {read} bytes from offset {start})"))),
    )
}

/// The registry's loader of files of `format`, or `None` when nothing registered one.
pub fn load_file(path: &str, format: &str) -> Option<Result<ObjRef<Module>>> {
    let name = format!("runtime.module.loadfile_{format}");
    let loader = registry::get(&name)?;
    let mut args = ArgsBuilder::new();
    args.str(path).str(format);
    Some(loader.call(&args.args()).and_then(|rv| into_module(rv, &name)))
}

/// The names the registry has loaders under (`prefix` then the key), for error messages.
pub fn registered(prefix: &str) -> Vec<String> {
    registry::names().into_iter().filter_map(|n| n.strip_prefix(prefix).map(str::to_string)).collect()
}

fn into_module(rv: RetValue, loader: &str) -> Result<ObjRef<Module>> {
    match rv {
        RetValue::None => Err(Error::value(format!("{loader} returned no module"))),
        rv => {
            let what = format!("{rv:?}");
            rv.into_object::<Module>().map_err(|_| Error::type_err(format!("{loader} returned {what}, not a module")))
        }
    }
}

/// The stream's reads: up to `n` bytes of the blob into `dst`, advancing the reader; a read past
/// the blob's end gives what is left and zeroes the rest of `dst`, so a loader that does not check
/// the count reads zeros, never stale memory.
unsafe extern "C" fn read_into(ctx: *mut c_void, dst: *mut c_void, n: usize) -> usize {
    let copied = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `ctx` is the `&mut Reader` `load_binary` lent the stream, alive for the call.
        let r = unsafe { &mut **ctx.cast::<&mut Reader<'_>>() };
        let take = n.min(r.remaining());
        let bytes = r.bytes(take).unwrap_or_default();
        // SAFETY: the loader's buffer of `n` bytes; `bytes` is the blob's, which it cannot overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst.cast::<u8>(), bytes.len());
            std::ptr::write_bytes(dst.cast::<u8>().add(bytes.len()), 0, n - bytes.len());
        }
        bytes.len()
    }));
    copied.unwrap_or(0)
}
