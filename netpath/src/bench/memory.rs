//! The process's memory and the kernel memory of its BPF maps and programs.

use super::*;

/// This process's resident set now and at its peak (`VmRSS`, `VmHWM` of /proc/self/status),
/// KiB; 0 when /proc does not say.
pub(super) fn rss_kib() -> (u64, u64) {
    procfs::process::Process::myself()
        .and_then(|p| p.status())
        .map_or((0, 0), |s| (s.vmrss.unwrap_or(0), s.vmhwm.unwrap_or(0)))
}

/// `key:\tvalue` lines of an fdinfo file.
pub(super) fn fdinfo(text: &str) -> BTreeMap<&str, &str> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim(), v.trim()))
        })
        .collect()
}

/// BPF map types whose values are per CPU.
pub(super) fn per_cpu_type(t: u32) -> bool {
    // PERCPU_HASH, PERCPU_ARRAY, LRU_PERCPU_HASH, PERCPU_CGROUP_STORAGE
    matches!(t, 5 | 6 | 10 | 21)
}

/// The maps and programs this process holds (only netpath's: it holds no other BPF objects),
/// from `/proc/self/fdinfo`, deduplicated by id.
pub(super) fn bpf_memory() -> Result<Memory> {
    let ncpu = aya::util::nr_cpus().unwrap_or(1) as u64;
    let mut maps: BTreeMap<u32, MapMem> = BTreeMap::new();
    let mut progs: BTreeMap<u32, u64> = BTreeMap::new();
    for e in std::fs::read_dir("/proc/self/fd")?.flatten() {
        let Ok(target) = std::fs::read_link(e.path()) else {
            continue;
        };
        let target = target.to_string_lossy().into_owned();
        let is_map = target == "anon_inode:bpf-map";
        if !is_map && target != "anon_inode:bpf-prog" {
            continue;
        }
        let path = PathBuf::from("/proc/self/fdinfo").join(e.file_name());
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let info = fdinfo(&text);
        let get = |k: &str| info.get(k).and_then(|v| v.parse::<u64>().ok());
        let bytes = get("memlock").unwrap_or(0);
        if is_map {
            let Some(id) = get("map_id") else { continue };
            let map_type = get("map_type").unwrap_or(0) as u32;
            let name = aya::maps::MapInfo::from_id(id as u32)
                .ok()
                .and_then(|i| i.name_as_str().map(str::to_string))
                .unwrap_or_default();
            maps.insert(
                id as u32,
                MapMem {
                    name,
                    map_type,
                    per_cpu: per_cpu_type(map_type),
                    max_entries: get("max_entries").unwrap_or(0) as u32,
                    value_size: get("value_size").unwrap_or(0) as u32,
                    bytes,
                },
            );
        } else if let Some(id) = get("prog_id") {
            progs.insert(id as u32, bytes);
        }
    }
    let mut maps: Vec<MapMem> = maps.into_values().collect();
    maps.sort_by_key(|m| std::cmp::Reverse(m.bytes));
    let maps_bytes = maps.iter().map(|m| m.bytes).sum();
    // Per-CPU part: each per-CPU map holds max_entries values (rounded up to 8 bytes) per
    // possible CPU.
    let per_cpu_bytes_each: u64 = maps
        .iter()
        .filter(|m| m.per_cpu)
        .map(|m| u64::from(m.max_entries) * u64::from(m.value_size).next_multiple_of(8))
        .sum();
    let per_cpu_bytes = (per_cpu_bytes_each * ncpu).min(maps_bytes);
    Ok(Memory {
        maps_bytes_at_64_cpus: maps_bytes - per_cpu_bytes + 64 * per_cpu_bytes_each,
        maps,
        maps_bytes,
        per_cpu_bytes,
        per_cpu_bytes_each,
        programs: progs.len(),
        programs_bytes: progs.values().sum(),
        ..Memory::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fdinfo() {
        let f = fdinfo("pos:\t0\nmap_type:\t6\nmemlock:\t4096\nmap_id:\t17\n");
        assert_eq!(f["map_type"], "6");
        assert_eq!(f["memlock"], "4096");
        assert!(per_cpu_type(6) && !per_cpu_type(1));
    }
}
