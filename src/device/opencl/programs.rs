//! Built programs as bytes, so a host pays `clBuildProgram` once per device rather than at every
//! launch: the blob of `opencl.GetPreCompiledPrograms` / `opencl.SetPreCompiledPrograms` in
//! upstream's format (u64 count, then per kernel its name and its program binary, each as a u64
//! length and the bytes), and a program's binary read from, or made into, a driver's program.

use super::sys::{self, check, ClUint};
use super::State;
use crate::error::{Error, Result};
use crate::stream::{Reader, Writer};
use std::ffi::c_void;

const CL_PROGRAM_NUM_DEVICES: ClUint = 0x1162;
const CL_PROGRAM_DEVICES: ClUint = 0x1163;
const CL_PROGRAM_BINARY_SIZES: ClUint = 0x1165;
const CL_PROGRAM_BINARIES: ClUint = 0x1166;

/// The blob: `(kernel name, program binary)` in the order given.
pub fn encode<'a>(programs: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Vec<u8> {
    let programs: Vec<_> = programs.into_iter().collect();
    let mut w = Writer::default();
    w.u64(programs.len() as u64);
    for (name, binary) in programs {
        w.string(name);
        w.u64(binary.len() as u64);
        w.bytes(binary);
    }
    w.buf
}

/// The blob's entries, read whole before anything is built (a truncated or corrupt blob installs
/// nothing).
pub fn decode(blob: &[u8]) -> Result<Vec<(&str, &[u8])>> {
    let mut r = Reader::new(blob, "pre-compiled OpenCL programs");
    // Each entry holds two lengths at least.
    let n = r.count(16)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.string()?;
        let len = r.count(1)?;
        let binary = r.bytes(len)?;
        if binary.is_empty() {
            return Err(r.error(format!("kernel {name}'s program binary is empty")));
        }
        out.push((name, binary));
    }
    if !r.is_at_end() {
        return Err(r.error("trailing bytes after the programs"));
    }
    Ok(out)
}

/// The binary `program` holds for `device` (a program may cover every device of its context;
/// the binary of one is asked for by its place in the program's device list).
pub fn binary_of(s: &State, program: sys::Program, device: sys::DeviceId) -> Result<Vec<u8>> {
    let info = |param: ClUint, n: usize, p: *mut c_void, r: *mut usize| {
        // SAFETY: a live program; `p` holds `n` writable bytes (or is null with `n` = 0).
        unsafe { (s.api.clGetProgramInfo)(program, param, n, p, r) }
    };
    let mut count: ClUint = 0;
    let out = (&mut count as *mut ClUint).cast();
    check(info(CL_PROGRAM_NUM_DEVICES, std::mem::size_of::<ClUint>(), out, std::ptr::null_mut()), "clGetProgramInfo")?;
    let count = count as usize;
    let mut devices: Vec<sys::DeviceId> = vec![std::ptr::null_mut(); count];
    let size = count * std::mem::size_of::<sys::DeviceId>();
    check(info(CL_PROGRAM_DEVICES, size, devices.as_mut_ptr().cast(), std::ptr::null_mut()), "clGetProgramInfo")?;
    let at = devices
        .iter()
        .position(|&d| d == device)
        .ok_or_else(|| Error::internal("a program built for a device it does not list"))?;
    let mut sizes = vec![0usize; count];
    let size = count * std::mem::size_of::<usize>();
    check(info(CL_PROGRAM_BINARY_SIZES, size, sizes.as_mut_ptr().cast(), std::ptr::null_mut()), "clGetProgramInfo")?;
    let at =
        binary_place(&sizes, at).ok_or_else(|| Error::tvm("the OpenCL driver gives no binary for a built program"))?;
    let mut binary = vec![0u8; sizes[at]];
    // The driver copies each device's binary where its pointer says; null pointers are skipped.
    let mut targets: Vec<*mut u8> = vec![std::ptr::null_mut(); count];
    targets[at] = binary.as_mut_ptr();
    let size = count * std::mem::size_of::<*mut u8>();
    check(info(CL_PROGRAM_BINARIES, size, targets.as_mut_ptr().cast(), std::ptr::null_mut()), "clGetProgramInfo")?;
    Ok(binary)
}

/// Where the binary of the device at place `at` of a program's device list is, given the sizes the
/// driver reports per place. pocl 3.1 reports the binary of a program built for one device of a
/// two-device context at the first place, whichever device it was built for: a program built for
/// one device has one binary, and that is it.
fn binary_place(sizes: &[usize], at: usize) -> Option<usize> {
    if sizes.get(at).is_some_and(|&n| n > 0) {
        return Some(at);
    }
    let mut built = (0..sizes.len()).filter(|&i| sizes[i] > 0);
    match (built.next(), built.next()) {
        (Some(only), None) => Some(only),
        _ => None,
    }
}

/// A program for `device` made from a binary the driver gave out earlier (not yet built).
pub fn from_binary(s: &State, context: sys::Context, device: sys::DeviceId, binary: &[u8]) -> Result<sys::Program> {
    let (mut status, mut rc) = (0, 0);
    let (ptr, len) = (binary.as_ptr(), binary.len());
    // SAFETY: one device of `context`, one binary of `len` readable bytes, two status slots.
    let program = unsafe { (s.api.clCreateProgramWithBinary)(context, 1, &device, &len, &ptr, &mut status, &mut rc) };
    if rc == sys::CL_SUCCESS && status != sys::CL_SUCCESS {
        // SAFETY: a program made above, handed out to no one.
        unsafe { (s.api.clReleaseProgram)(program) };
        rc = status;
    }
    check(rc, "clCreateProgramWithBinary")?;
    Ok(program)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_blob_round_trips_and_refuses_damage() {
        let blob = encode([("k_a", &b"\x7fELF-a"[..]), ("k_b", &b"bin\0b"[..])]);
        assert_eq!(&blob[..8], &2u64.to_le_bytes(), "the count first");
        assert_eq!(&blob[8..16], &3u64.to_le_bytes(), "then the first name's length");
        assert_eq!(decode(&blob).unwrap(), vec![("k_a", &b"\x7fELF-a"[..]), ("k_b", &b"bin\0b"[..])]);
        for cut in 0..blob.len() {
            assert!(decode(&blob[..cut]).is_err(), "a blob cut at {cut} of {} bytes", blob.len());
        }
        let mut longer = blob.clone();
        longer.push(0);
        assert!(decode(&longer).unwrap_err().to_string().contains("trailing bytes"));
        let empty = encode([("k", &b""[..])]);
        assert!(decode(&empty).unwrap_err().to_string().contains("k's program binary is empty"));
        assert!(decode(&u64::MAX.to_le_bytes()).unwrap_err().to_string().contains("exceeds"));
    }

    #[test]
    fn the_binary_of_a_device_is_found_at_its_place_or_as_the_only_one() {
        assert_eq!(binary_place(&[7], 0), Some(0));
        assert_eq!(binary_place(&[3, 4], 1), Some(1), "each device its own");
        assert_eq!(binary_place(&[5, 0], 1), Some(0), "pocl: the only binary, at the first place");
        assert_eq!(binary_place(&[0, 0], 1), None, "none built");
        assert_eq!(binary_place(&[3, 4, 0], 2), None, "two others built: neither is this device's");
        assert_eq!(binary_place(&[], 0), None);
    }
}
