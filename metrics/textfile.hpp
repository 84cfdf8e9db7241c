#pragma once
#include <string>
#include <string_view>

namespace sluice::metrics {

// node_exporter's textfile collector for short-lived `sluice exec` runs: every run adds its counters
// and histograms to one aggregate file, DIR/sluice_exec.prom, so that the series stay counters across
// runs (one file per run would make them gauges that vanish). Gauges keep the latest value;
// sluice_connections_active is left out (always 0 once a run is over). The update holds an flock on
// DIR/.sluice_exec.prom.lock and replaces the file by rename, so the collector never reads half a file.
inline constexpr std::string_view textfile_name = "sluice_exec.prom";

// Throws std::runtime_error naming the directory and the fix when it cannot be used.
void check_textfile_dir(const std::string &dir);
void merge_into_textfile(const std::string &dir, std::string_view exposition);

// The merge itself (pure, for tests): `current` and `addition` are Prometheus text expositions.
std::string merge_expositions(std::string_view current, std::string_view addition);

} // namespace sluice::metrics
