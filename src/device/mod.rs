//! Devices: one [`DeviceApi`] per device type (the CPU, OpenCL), behind which every allocation,
//! copy, synchronisation and attribute query of a tensor's memory goes. The C API, NDArrays and the
//! executor speak to this trait only; a new backend (CUDA, Vulkan, Metal) is one more module and
//! one more arm in [`api`] (docs/DEVICES.md).
//!
//! What `DLTensor.data` holds is the device's business: a host address on the CPU, the address of
//! a buffer descriptor on OpenCL (upstream's layout, which hosts and kernels rely on). Code outside
//! a device's module never dereferences it.

pub mod cpu;
pub(crate) mod memory;
pub mod opencl;
pub mod texture;

pub use crate::dlpack::kDLOpenCL;
use crate::dlpack::{kDLCPU, kDLCUDAHost, DLDataType, DLDevice};
use crate::error::{Error, Result};
use std::ffi::c_void;

pub use memory::DeviceMemory;

/// One side of a copy: a tensor's `data` on its device and a byte offset from it.
#[derive(Clone, Copy, Debug)]
pub struct Place {
    pub data: *mut c_void,
    pub offset: usize,
    pub device: DLDevice,
    /// The tensor's shape where the memory may be a texture (an image is addressed in pixels of
    /// the shape's folding, [`texture::Texture::extent`]); `None` copies a whole image.
    pub shape: Option<Dims>,
}

/// A tensor shape carried by value with a [`Place`] (ranks up to 8; textures have 3 to 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    len: u8,
    dims: [i64; 8],
}

impl Dims {
    /// `shape` by value, or `None` for a rank above 8 (never a texture's).
    #[inline]
    pub fn of(shape: &[i64]) -> Option<Dims> {
        let mut dims = [0; 8];
        dims.get_mut(..shape.len())?.copy_from_slice(shape);
        Some(Dims { len: shape.len() as u8, dims })
    }

    pub fn as_slice(&self) -> &[i64] {
        &self.dims[..usize::from(self.len)]
    }
}

impl Place {
    /// The same place, for a tensor of `shape`.
    #[inline]
    pub fn with_shape(self, shape: &[i64]) -> Place {
        Place { shape: Dims::of(shape), ..self }
    }
}

/// A device attribute's value (`runtime.GetDeviceAttr`).
#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    Int(i64),
    Str(String),
}

/// The attribute kinds of upstream's `DeviceAttrKind`.
pub mod attr {
    pub const EXIST: i32 = 0;
    pub const MAX_THREADS_PER_BLOCK: i32 = 1;
    pub const WARP_SIZE: i32 = 2;
    pub const MAX_SHARED_MEMORY_PER_BLOCK: i32 = 3;
    pub const COMPUTE_VERSION: i32 = 4;
    pub const DEVICE_NAME: i32 = 5;
    pub const MAX_CLOCK_RATE: i32 = 6;
    pub const MULTI_PROCESSOR_COUNT: i32 = 7;
    pub const MAX_THREAD_DIMENSIONS: i32 = 8;
    pub const API_VERSION: i32 = 11;
    pub const DRIVER_VERSION: i32 = 12;
    pub const L2_CACHE_SIZE_BYTES: i32 = 13;
    pub const TOTAL_GLOBAL_MEMORY: i32 = 14;
}

/// What one device type does with memory. `id` is the device's index among those of its type.
///
/// Handles are what `DLTensor.data` holds on the device; the unsafe methods take handles the
/// caller got from the same API (or a host passed as a tensor of that device), still allocated.
pub trait DeviceApi: Send + Sync {
    /// Upstream's name of the device type (`device_api.<name>`).
    fn name(&self) -> &'static str;

    /// How many devices of this type exist (initialising the backend on first use).
    fn count(&self) -> Result<usize>;

    /// An attribute of device `id`: `None` where upstream leaves it unset.
    fn attr(&self, id: i32, kind: i32) -> Result<Option<Attr>>;

    /// Makes `id` the calling thread's current device (what kernels launch on).
    fn set_device(&self, id: i32) -> Result<()>;

    /// Zeroed memory of `nbytes` on device `id`, aligned to at least `alignment` where the device
    /// places memory at addresses (the host; OpenCL hands out buffer objects and ignores it, as
    /// upstream's).
    fn alloc(&self, id: i32, nbytes: usize, alignment: usize) -> Result<*mut c_void>;

    /// A zeroed image on device `id` for a tensor of `shape` and `dtype` in memory scope `texture`
    /// (folded as [`texture::Texture::extent`] says), freed with [`DeviceApi::free`]. Devices
    /// without images refuse.
    fn alloc_texture(
        &self,
        id: i32,
        texture: texture::Texture,
        shape: &[i64],
        dtype: DLDataType,
    ) -> Result<*mut c_void> {
        let _ = (shape, dtype);
        Err(Error::value(format!("memory scope '{}' needs images: {}({id}) has none", texture.scope(), self.name())))
    }

    /// Frees memory from [`DeviceApi::alloc`] or [`DeviceApi::region`].
    ///
    /// # Safety
    /// `data` came from this API for device `id` and is not used after the call.
    unsafe fn free(&self, id: i32, data: *mut c_void) -> Result<()>;

    /// The alignment a region's offset needs on device `id`.
    fn region_alignment(&self, id: i32) -> Result<usize>;

    /// A handle to bytes `offset..offset + len` of `data` that kernels take as a tensor of their
    /// own (kernels never see a byte offset); free it with [`DeviceApi::free`] before `data`.
    ///
    /// # Safety
    /// `data` is live memory of this API on device `id`, at least `offset + len` bytes.
    unsafe fn region(&self, id: i32, data: *mut c_void, offset: usize, len: usize) -> Result<*mut c_void>;

    /// Copies `nbytes` between two places, at least one of them on this API's device type.
    ///
    /// # Safety
    /// Both places address at least `nbytes` bytes from their offsets, valid on their devices.
    unsafe fn copy(&self, from: Place, to: Place, nbytes: usize) -> Result<()>;

    /// Waits for everything the calling thread's current stream of device `id` holds (see the
    /// streams below): what this library queued for it from this thread.
    fn sync(&self, id: i32) -> Result<()>;

    // Streams. The ordering this library relies on, and a backend provides: work it queues for a
    // device (kernel launches, copies, fills) goes on the calling thread's current stream, in
    // the order queued; a copy to or from the host returns once the host side is done with (so a
    // later host write cannot reach a copy still queued); `sync` waits for that stream. Nothing is
    // assumed across streams: memory handed back for reuse while work on it may still be queued
    // (an arena a pooled run gives back, folding's results) is waited for with `sync` first, and
    // kernel scratch is reused only on the stream it was last used on. Freeing memory with work
    // still queued on it is the backend's to make safe (OpenCL keeps a buffer until the commands
    // using it finish; a CUDA backend would free in stream order or after a sync). A device with
    // one queue keeps the defaults: streams are NULL, setting one changes nothing.

    /// A new stream on device `id` (NULL where the device has one queue).
    fn create_stream(&self, _id: i32) -> Result<*mut c_void> {
        Ok(std::ptr::null_mut())
    }

    /// Waits for the work on `stream`, then releases it; a backend with streams refuses handles
    /// it did not make (the default has none to release).
    fn free_stream(&self, _id: i32, _stream: *mut c_void) -> Result<()> {
        Ok(())
    }

    /// Makes `stream` the calling thread's current stream of device `id` (NULL: the default).
    fn set_stream(&self, _id: i32, _stream: *mut c_void) -> Result<()> {
        Ok(())
    }

    /// The calling thread's current stream of device `id` (NULL: the default).
    fn current_stream(&self, _id: i32) -> Result<*mut c_void> {
        Ok(std::ptr::null_mut())
    }

    /// Waits for the work on `stream` (NULL: the calling thread's current stream).
    fn sync_stream(&self, id: i32, stream: *mut c_void) -> Result<()> {
        if stream.is_null() {
            self.sync(id)
        } else {
            Err(Error::value(format!("{stream:?} is not a stream of {}({id})", self.name())))
        }
    }

    /// Orders work queued on `to` from now on after the work on `from` so far.
    fn sync_stream_from_to(&self, _id: i32, _from: *mut c_void, _to: *mut c_void) -> Result<()> {
        Ok(())
    }

    /// Scratch memory for a kernel (`TVMBackendAllocWorkspace`).
    fn alloc_workspace(&self, id: i32, nbytes: usize) -> Result<*mut c_void>;

    /// Returns scratch memory; anything [`DeviceApi::alloc_workspace`] did not hand out is refused.
    fn free_workspace(&self, id: i32, data: *mut c_void) -> Result<()>;

    /// Whether memory of device `a` is valid for kernels on device `b` (of this type) as it is.
    fn same_memory(&self, a: i32, b: i32) -> bool {
        a == b
    }

    /// Returns memory kept for reuse (kernel scratch parked between runs) to the device; a device
    /// never used is left alone.
    fn release_idle(&self) {}
}

/// Returns what every device keeps for reuse (when the last executor goes).
pub fn release_idle() {
    opencl::api().release_idle();
}

/// The device types of RPC sessions: a device of session `k` is its remote type plus
/// `RPC_SESS_MASK * (k + 1)`.
pub const RPC_SESS_MASK: i32 = 128;

/// The API of remote devices (of RPC sessions), by masked device type: installed by the RPC layer
/// at the runtime's init, so this layer does not depend on the one above it.
type RemoteApi = fn(i32) -> Result<&'static dyn DeviceApi>;
static REMOTE: std::sync::OnceLock<RemoteApi> = std::sync::OnceLock::new();

/// Installs the API of remote devices; the first installation wins.
pub fn install_remote(api: RemoteApi) {
    let _ = REMOTE.set(api);
}

/// Whether `device` is a device of an RPC session.
pub fn is_remote(device: DLDevice) -> bool {
    device.device_type >= RPC_SESS_MASK
}

/// The API of a device type, or an error saying it is not served.
pub fn api(device_type: i32) -> Result<&'static dyn DeviceApi> {
    match device_type {
        kDLCPU | kDLCUDAHost => Ok(&cpu::Cpu),
        kDLOpenCL => Ok(opencl::api()),
        t if t >= RPC_SESS_MASK => {
            REMOTE.get().ok_or_else(|| Error::value("RPC devices are not available: the runtime is not initialised"))?(
                t,
            )
        }
        other => Err(Error::value(format!(
            "Device API {} is not enabled: this runtime serves the CPU (1) and OpenCL (4)",
            type_name(other)
        ))),
    }
}

/// The API of `device`, checking that the device exists.
pub fn api_of(device: DLDevice) -> Result<&'static dyn DeviceApi> {
    let api = api(device.device_type)?;
    // A remote device is checked by its server.
    if !is_host(device) && !is_remote(device) {
        let n = api.count()?;
        if device.device_id < 0 || device.device_id as usize >= n {
            return Err(Error::value(format!(
                "Invalid device id {}: {} has {n} device(s)",
                device.device_id,
                api.name()
            )));
        }
    }
    Ok(api)
}

/// Refuses memory scopes other than plain memory (`""`, `"global"`), for the paths that allocate
/// plain memory only (an unknown scope and a texture scope each with their own message).
pub fn check_memory_scope(scope: &str) -> Result<()> {
    match texture::Texture::of_scope(scope)? {
        None => Ok(()),
        Some(_) => Err(Error::value(format!(
            "memory scope '{scope}' is not served here: textures are allocated by TVMDeviceAllocDataSpaceWithScope,              runtime.TVMArrayAllocWithScope and the graph executor, on devices with images"
        ))),
    }
}

/// Whether `device` is host memory (kernels and copies use plain addresses).
pub fn is_host(device: DLDevice) -> bool {
    matches!(device.device_type, kDLCPU | kDLCUDAHost)
}

/// Copies `nbytes` between two places on any devices, through the API of the non-host side.
/// Inlined: the host's copy, every request's, then works on its callers' places where they are
/// (a `Place` is a hundred bytes, shape included).
///
/// # Safety
/// As [`DeviceApi::copy`].
#[inline]
pub unsafe fn copy(from: Place, to: Place, nbytes: usize) -> Result<()> {
    let (a, b) = (from.device, to.device);
    if is_host(a) && is_host(b) {
        // The copy of every host request (inputs in, outputs out): straight to the bytes, as the
        // CPU's own API would, without looking it up.
        if nbytes > 0 {
            // SAFETY: both places hold `nbytes` from their offsets (the caller's promise); `copy`
            // allows overlap, as a host may copy a tensor onto a view of itself.
            unsafe {
                std::ptr::copy(
                    from.data.cast::<u8>().add(from.offset).cast_const(),
                    to.data.cast::<u8>().add(to.offset),
                    nbytes,
                )
            };
        }
        return Ok(());
    }
    // SAFETY: the caller's promise.
    unsafe { copy_on_device(from, to, nbytes) }
}

/// [`copy`] where either side is a device's.
///
/// # Safety
/// As [`DeviceApi::copy`].
#[inline(never)]
unsafe fn copy_on_device(from: Place, to: Place, nbytes: usize) -> Result<()> {
    let (a, b) = (from.device, to.device);
    if !is_host(a) && !is_host(b) && a.device_type != b.device_type {
        return Err(Error::value(format!(
            "Can not copy across different device types directly: from {} to {}",
            type_name(a.device_type),
            type_name(b.device_type)
        )));
    }
    let api = api_of(if is_host(a) { b } else { a })?;
    // SAFETY: the caller's promise.
    unsafe { api.copy(from, to, nbytes) }
}

/// A device as TVM's Python prints one: `cpu(0)`, `opencl(1)`, `remote[0]:cpu(0)`.
pub fn describe(device: DLDevice) -> String {
    if is_remote(device) {
        let (session, t) = (device.device_type / RPC_SESS_MASK - 1, device.device_type % RPC_SESS_MASK);
        return format!("remote[{session}]:{}({})", type_name(t), device.device_id);
    }
    format!("{}({})", type_name(device.device_type), device.device_id)
}

/// Whether memory allocated on `a` can be used by kernels on `b` as it is: the same device, the
/// host for host devices, or devices of one type whose API says they share memory (OpenCL devices
/// of one platform share its context).
pub fn same_memory(a: DLDevice, b: DLDevice) -> bool {
    if a == b || (is_host(a) && is_host(b)) {
        return true;
    }
    a.device_type == b.device_type && api(a.device_type).is_ok_and(|api| api.same_memory(a.device_id, b.device_id))
}

/// Upstream's name of a device type code.
pub fn type_name(device_type: i32) -> String {
    let name = match device_type {
        1 => "cpu",
        2 => "cuda",
        3 => "cuda_host",
        4 => "opencl",
        7 => "vulkan",
        8 => "metal",
        9 => "vpi",
        10 => "rocm",
        11 => "rocm_host",
        12 => "ext_dev",
        13 => "cuda_managed",
        14 => "oneapi",
        15 => "webgpu",
        16 => "hexagon",
        _ => return format!("device type {device_type}"),
    };
    name.to_string()
}
