//! The source line behind a JIT address of a loaded BPF program: each program's line table
//! (`BPF_OBJ_GET_INFO_BY_FD`: the JIT address of every `line_info` record) with each line's
//! file, number and text from the program's BTF. Programs go when the run ends, so tables are
//! taken while it runs (`add_loaded`, repeatedly: a program already taken is skipped).

use std::{
    collections::{HashMap, HashSet},
    mem,
    os::fd::{AsFd as _, AsRawFd as _},
};

use anyhow::{Context as _, bail};
use aya_obj::generated::{bpf_attr, bpf_btf_info, bpf_cmd, bpf_line_info, bpf_prog_info};

/// A line: where it is and what it says.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Line {
    pub file: String,
    pub number: u32,
    pub text: String,
}

#[derive(Default)]
pub struct Lines {
    /// (JIT address where the line's code starts, line), sorted by address once `seal`ed.
    starts: Vec<(u64, Line)>,
    taken: HashSet<u32>,
    /// String sections by BTF id: the programs of one object share their BTF.
    strings: HashMap<u32, Vec<u8>>,
}

impl Lines {
    /// Takes the line table of every loaded program not taken yet.
    pub fn add_loaded(&mut self) {
        for info in aya::programs::loaded_programs().flatten() {
            if !self.taken.insert(info.id()) {
                continue;
            }
            let Ok(fd) = info.fd() else { continue };
            // A program without line info (not netpath's, or gone meanwhile) adds nothing.
            if let Ok(lines) = table(fd.as_fd().as_raw_fd(), &mut self.strings) {
                self.starts.extend(lines);
            }
        }
    }

    pub fn seal(&mut self) {
        self.starts.sort_by_key(|(a, _)| *a);
    }

    /// The line whose code holds `ip`: the last line starting at or before it, if it starts
    /// within a page (past a program's last line is not that program any more).
    pub fn at(&self, ip: u64) -> Option<&Line> {
        let i = self
            .starts
            .partition_point(|(a, _)| *a <= ip)
            .checked_sub(1)?;
        let (start, line) = &self.starts[i];
        (ip - start < 4096).then_some(line)
    }

    #[cfg(test)]
    pub fn from_starts(starts: Vec<(u64, Line)>) -> Lines {
        let mut l = Lines {
            starts,
            taken: HashSet::new(),
            strings: HashMap::new(),
        };
        l.seal();
        l
    }
}

fn sys_bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> anyhow::Result<i64> {
    // SAFETY: `attr` is a whole bpf_attr; the pointers in it point to live buffers.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as i64,
            attr as *mut bpf_attr,
            mem::size_of::<bpf_attr>(),
        )
    };
    if r < 0 {
        bail!("bpf({cmd:?}): {}", std::io::Error::last_os_error());
    }
    Ok(r)
}

/// `BPF_OBJ_GET_INFO_BY_FD` into `info` (its pointers set by the caller).
fn info_by_fd<T>(fd: i32, info: &mut T) -> anyhow::Result<()> {
    // SAFETY: zeroed is a valid bpf_attr.
    let mut attr: bpf_attr = unsafe { mem::zeroed() };
    attr.info.bpf_fd = fd as u32;
    attr.info.info_len = mem::size_of::<T>() as u32;
    attr.info.info = info as *mut T as u64;
    sys_bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr).map(drop)
}

/// The program's lines, each with the JIT address its code starts at; its BTF's strings read
/// once per BTF object into `strings`.
fn table(fd: i32, strings: &mut HashMap<u32, Vec<u8>>) -> anyhow::Result<Vec<(u64, Line)>> {
    // SAFETY: zeroed is a valid bpf_prog_info.
    let mut info: bpf_prog_info = unsafe { mem::zeroed() };
    info_by_fd(fd, &mut info)?;
    let n = info.nr_line_info as usize;
    if n == 0 || info.nr_jited_line_info as usize != n || info.btf_id == 0 {
        bail!("no line info");
    }
    let btf_id = info.btf_id;
    // SAFETY: zeroed is a valid bpf_line_info.
    let mut lines = vec![unsafe { mem::zeroed::<bpf_line_info>() }; n];
    let mut jited = vec![0u64; n];
    // SAFETY: zeroed is a valid bpf_prog_info.
    let mut want: bpf_prog_info = unsafe { mem::zeroed() };
    want.nr_line_info = n as u32;
    want.line_info_rec_size = mem::size_of::<bpf_line_info>() as u32;
    want.line_info = lines.as_mut_ptr() as u64;
    want.nr_jited_line_info = n as u32;
    want.jited_line_info_rec_size = 8;
    want.jited_line_info = jited.as_mut_ptr() as u64;
    info_by_fd(fd, &mut want)?;
    let strings = match strings.entry(btf_id) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => e.insert(btf_strings(btf_id)?),
    };
    let at = |off: u32| -> String {
        let s = strings.get(off as usize..).unwrap_or_default();
        let end = s.iter().position(|&b| b == 0).unwrap_or(s.len());
        String::from_utf8_lossy(&s[..end]).into_owned()
    };
    Ok(lines
        .iter()
        .zip(jited)
        .map(|(l, addr)| {
            let line = Line {
                file: short_path(&at(l.file_name_off)),
                number: l.line_col >> 10,
                text: at(l.line_off).trim().to_string(),
            };
            (addr, line)
        })
        .collect())
}

/// The string section of BTF object `id` (where line info's names and texts are).
fn btf_strings(id: u32) -> anyhow::Result<Vec<u8>> {
    // SAFETY: zeroed is a valid bpf_attr.
    let mut attr: bpf_attr = unsafe { mem::zeroed() };
    attr.__bindgen_anon_6.__bindgen_anon_1.btf_id = id;
    let fd = sys_bpf(bpf_cmd::BPF_BTF_GET_FD_BY_ID, &mut attr)? as i32;
    // SAFETY: the kernel gave us this fd; OwnedFd closes it.
    let _owned = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: zeroed is a valid bpf_btf_info.
    let mut info: bpf_btf_info = unsafe { mem::zeroed() };
    info_by_fd(fd, &mut info)?;
    let mut data = vec![0u8; info.btf_size as usize];
    // SAFETY: as above.
    let mut want: bpf_btf_info = unsafe { mem::zeroed() };
    want.btf = data.as_mut_ptr() as u64;
    want.btf_size = data.len() as u32;
    info_by_fd(fd, &mut want)?;
    string_section(&data).context("reading the program's BTF")
}

/// BTF's header: magic, version, flags, header length, then (offset, length) of the type and
/// string sections after the header (`include/uapi/linux/btf.h`).
fn string_section(btf: &[u8]) -> Option<Vec<u8>> {
    let u32_at = |i: usize| Some(u32::from_ne_bytes(btf.get(i..i + 4)?.try_into().ok()?));
    if btf.get(0..2)? != 0xeb9fu16.to_ne_bytes() {
        return None;
    }
    let hdr = u32_at(4)? as usize;
    let (off, len) = (u32_at(16)? as usize, u32_at(20)? as usize);
    Some(btf.get(hdr + off..hdr + off + len)?.to_vec())
}

/// A source path from where the crate starts (`netpath-ebpf/src/…`), or its last two parts.
fn short_path(p: &str) -> String {
    for root in ["netpath-ebpf/", "netpath-common/"] {
        if let Some(i) = p.find(root) {
            return p[i..].to_string();
        }
    }
    let parts: Vec<&str> = p.rsplit('/').take(2).collect();
    parts.into_iter().rev().collect::<Vec<_>>().join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_names_the_line_it_falls_in() {
        let line = |n| Line {
            file: "netpath-ebpf/src/state.rs".into(),
            number: n,
            text: format!("line {n}"),
        };
        let l = Lines::from_starts(vec![(0x2000, line(2)), (0x1000, line(1))]);
        assert_eq!(l.at(0x0fff), None);
        assert_eq!(l.at(0x1000).unwrap().number, 1);
        assert_eq!(l.at(0x1fff).unwrap().number, 1);
        assert_eq!(l.at(0x2010).unwrap().number, 2);
        assert_eq!(l.at(0x2000 + 4096), None);
    }

    #[test]
    fn paths_start_at_the_crate() {
        assert_eq!(
            short_path("/work/main/netpath-ebpf/src/state.rs"),
            "netpath-ebpf/src/state.rs"
        );
        assert_eq!(
            short_path("/root/.cargo/x/src/maps/array.rs"),
            "maps/array.rs"
        );
    }

    #[test]
    fn the_string_section_is_found_from_the_header() {
        let mut btf = Vec::new();
        btf.extend(0xeb9fu16.to_ne_bytes());
        btf.extend([1u8, 0]);
        for v in [24u32, 0, 4, 4, 6] {
            btf.extend(v.to_ne_bytes());
        }
        btf.extend([9u8; 4]);
        btf.extend(b"\0abcd\0");
        assert_eq!(string_section(&btf).unwrap(), b"\0abcd\0");
    }
}
