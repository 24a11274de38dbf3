//! Finding the devices, as upstream: GPU devices of every platform, else CPU devices; OpenCL 1.2
//! or later; one context per platform and one in-order queue per device. A failed attempt releases
//! what it made and is tried again at the next use.

use super::sys::{self, check, Api, ClUint};
use super::{info_bytes, info_string, Device, State};
use crate::error::Result;
use std::sync::Mutex;

impl State {
    pub(super) fn init() -> Result<State> {
        let api = Api::open()?;
        let mut n: ClUint = 0;
        // SAFETY: a count query with no output array.
        let rc = unsafe { (api.clGetPlatformIDs)(0, std::ptr::null_mut(), &mut n) };
        if rc == sys::CL_PLATFORM_NOT_FOUND_KHR {
            return Ok(State { api, devices: Vec::new() });
        }
        check(rc, "clGetPlatformIDs")?;
        if n == 0 {
            return Ok(State { api, devices: Vec::new() });
        }
        let mut platforms = vec![std::ptr::null_mut(); n as usize];
        // SAFETY: an array of `n` platform ids.
        check(unsafe { (api.clGetPlatformIDs)(n, platforms.as_mut_ptr(), std::ptr::null_mut()) }, "clGetPlatformIDs")?;
        // GPUs of every platform; CPU devices only when there is no GPU (upstream's order).
        let mut found = Self::devices_of(&api, &platforms, sys::CL_DEVICE_TYPE_GPU)?;
        if found.iter().all(Vec::is_empty) {
            found = Self::devices_of(&api, &platforms, sys::CL_DEVICE_TYPE_CPU)?;
        }
        let mut made = Made::default();
        match Self::open_devices(&api, found, &mut made) {
            Ok(devices) => Ok(State { api, devices }),
            Err(e) => {
                made.release(&api);
                Err(e)
            }
        }
    }

    /// Contexts and queues for the devices `found` per platform; what it made is in `made`.
    fn open_devices(api: &Api, found: Vec<Vec<sys::DeviceId>>, made: &mut Made) -> Result<Vec<Device>> {
        let mut devices = Vec::new();
        // One context per platform, over its matched devices.
        for ids in found.into_iter().filter(|ids| !ids.is_empty()) {
            let mut rc = 0;
            // SAFETY: the ids are devices of one platform; no callback.
            let context = unsafe {
                (api.clCreateContext)(
                    std::ptr::null(),
                    ids.len() as ClUint,
                    ids.as_ptr(),
                    std::ptr::null(),
                    std::ptr::null_mut(),
                    &mut rc,
                )
            };
            check(rc, "clCreateContext")?;
            made.contexts.push(context);
            for id in ids {
                // SAFETY: a device of this context; in-order, no profiling.
                let queue = unsafe { (api.clCreateCommandQueue)(context, id, 0, &mut rc) };
                check(rc, "clCreateCommandQueue")?;
                made.queues.push(queue);
                let string = |param| {
                    // SAFETY: a size query then a read into a buffer of that size.
                    info_bytes(|n, p, r| unsafe { (api.clGetDeviceInfo)(id, param, n, p, r) }, "clGetDeviceInfo")
                        .map(info_string)
                };
                let mut bits: ClUint = 0;
                let bits_ptr = (&mut bits as *mut ClUint).cast();
                // SAFETY: a cl_uint query into a cl_uint.
                let rc = unsafe {
                    (api.clGetDeviceInfo)(id, sys::CL_DEVICE_MEM_BASE_ADDR_ALIGN, 4, bits_ptr, std::ptr::null_mut())
                };
                check(rc, "clGetDeviceInfo")?;
                devices.push(Device {
                    id,
                    context,
                    queue,
                    name: string(sys::CL_DEVICE_NAME)?,
                    version: string(sys::CL_DEVICE_VERSION)?,
                    driver: string(sys::CL_DRIVER_VERSION)?,
                    base_align: (bits as usize / 8).max(crate::host_memory::ALIGNMENT).next_power_of_two(),
                    workspaces: Mutex::new(Vec::new()),
                });
            }
        }
        Ok(devices)
    }

    /// Per platform, its devices of `kind` that support OpenCL 1.2 or later.
    fn devices_of(api: &Api, platforms: &[sys::PlatformId], kind: u64) -> Result<Vec<Vec<sys::DeviceId>>> {
        let mut out = Vec::new();
        for &platform in platforms {
            let mut n: ClUint = 0;
            // SAFETY: a count query.
            let rc = unsafe { (api.clGetDeviceIDs)(platform, kind, 0, std::ptr::null_mut(), &mut n) };
            if rc != sys::CL_DEVICE_NOT_FOUND {
                check(rc, "clGetDeviceIDs")?;
            }
            if rc == sys::CL_DEVICE_NOT_FOUND || n == 0 {
                out.push(Vec::new());
                continue;
            }
            let mut ids = vec![std::ptr::null_mut(); n as usize];
            // SAFETY: an array of `n` ids.
            let rc = unsafe { (api.clGetDeviceIDs)(platform, kind, n, ids.as_mut_ptr(), std::ptr::null_mut()) };
            check(rc, "clGetDeviceIDs")?;
            // Devices older than OpenCL 1.2 are left out; a query that fails is an error (the
            // next use tries again), not a device that is not there.
            let mut usable = Vec::with_capacity(ids.len());
            for id in ids {
                // SAFETY: a size query then a read into a buffer of that size.
                let version = info_bytes(
                    |n, q, r| unsafe { (api.clGetDeviceInfo)(id, sys::CL_DEVICE_VERSION, n, q, r) },
                    "clGetDeviceInfo",
                )
                .map(info_string)?;
                if version_at_least_1_2(&version) {
                    usable.push(id);
                }
            }
            let ids = usable;
            out.push(ids);
        }
        Ok(out)
    }
}

/// What a failed initialisation made, to release.
#[derive(Default)]
struct Made {
    contexts: Vec<sys::Context>,
    queues: Vec<sys::Queue>,
}

impl Made {
    fn release(self, api: &Api) {
        for q in self.queues {
            // SAFETY: a queue made by the failed initialisation, used by nobody.
            unsafe { (api.clReleaseCommandQueue)(q) };
        }
        for c in self.contexts {
            // SAFETY: as above, after its queues.
            unsafe { (api.clReleaseContext)(c) };
        }
    }
}

fn version_at_least_1_2(version: &str) -> bool {
    let v = version.strip_prefix("OpenCL ").unwrap_or("");
    let num = v.split_whitespace().next().unwrap_or("");
    let mut parts = num.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (1, 2)
}

#[cfg(test)]
mod tests {
    use super::version_at_least_1_2;

    #[test]
    fn versions() {
        assert!(version_at_least_1_2("OpenCL 3.0 PoCL HSTR: pthread"));
        assert!(version_at_least_1_2("OpenCL 1.2 CUDA"));
        assert!(!version_at_least_1_2("OpenCL 1.1 Mesa"));
        assert!(!version_at_least_1_2("garbage"));
    }
}
