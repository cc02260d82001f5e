// `qjit tune --devices`: a list of specs spread over several GPUs of one
// kind, one worker thread per GPU with its own context (the device's primary
// context) and its own connection to the one cache file (WAL: the workers'
// writes interleave, none is lost). Each worker takes the next spec not yet
// taken, so a GPU that finishes early takes more.
#pragma once
#include <iosfwd>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "codegen/spec.h"
#include "runtime/device.h"
#include "tuner/tuner.h"

namespace qjit::tuner {

// The ordinals of `--devices`: "all" (every one of `count`) or a list
// "0,2,...". Throws qjit::Error("argument") naming the bad entry for a
// malformed list, a repeated device, or one that is not below `count`
// (count < 0: not known yet, only the syntax is checked).
std::vector<int> parse_device_list(const std::string& text, int count);

// Throws qjit::Error("argument") naming them when the chosen devices are not
// all of one kind (the same name and compute capability): a spec is tuned on
// one of them, and its winner is cached for that kind only.
void require_one_kind(const std::vector<runtime::VisibleDevice>& chosen);

// Tunes specs[i] (with only[i] as TuneOptions::only_configs when only is not
// empty) on `devices`, each worker opening `cache_path` itself. Progress
// goes to `progress` (null: none), each line prefixed with its GPU
// ("[gpu1] "). The reports come back in the specs' order. After an error a
// worker stops, the others finish the spec they hold and take no more, and
// the first error is thrown.
std::vector<TuneReport> tune_on_devices(const std::vector<codegen::OpSpec>& specs,
                                        const std::vector<std::vector<nlohmann::json>>& only,
                                        const TuneOptions& options, const std::vector<int>& devices,
                                        const std::string& cache_path, std::ostream* progress);

}  // namespace qjit::tuner
