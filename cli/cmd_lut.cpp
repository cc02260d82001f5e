// qjit lut report / fit / table: FP16 lookup tables without a GPU.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include "cli/common.h"
#include "codegen/error.h"
#include "codegen/json_input.h"
#include "codegen/ops/fp_lut_table.h"
#include "tuner/lut_tools.h"

namespace qjit::cli {
namespace {

namespace lut = codegen::lut;

// --table FILE | --fn NAME [--cuts default|seed]
lut::Table load_table(const std::string& file, const std::string& fn, const std::string& cuts) {
  if (!file.empty()) {
    const nlohmann::json j = parse_json_input(read_input_file("--table", file), "--table " + file);
    try {
      return lut::from_json(j);
    } catch (const nlohmann::json::exception& e) {
      throw Error("argument", "--table " + file + " is not a LUT table: " + e.what());
    }
  }
  if (cuts == "seed") {
    if (fn != "silu") throw Error("argument", "--cuts seed is the seed's SiLU table; --fn is '" + fn + "'");
    return lut::build(fn, lut::seed_silu_cuts());
  }
  if (cuts != "default") throw Error("argument", "--cuts '" + cuts + "' (expected default or seed; use --table for others)");
  return lut::build(fn, lut::default_cuts(fn));
}

std::string cuts_text(const lut::Table& t) {
  std::string s;
  for (float c : t.cuts) s += (s.empty() ? "" : ", ") + fmt("%.9g", c);
  return s;
}

}  // namespace

void add_lut(CLI::App& app, int& rc) {
  auto* lut_cmd = app.add_subcommand("lut", "FP16 lookup tables: error reports, cut-point fitting, table JSON");
  lut_cmd->require_subcommand(1);
  lut_cmd->footer(kExitCodesHelp);

  // ---- report ----
  auto* report = lut_cmd->add_subcommand("report", "max abs / rel error of tables over every finite fp16 input");
  struct ReportOpts {
    std::vector<std::string> fns;
    std::string table, png;
    bool with_seed = true, json = false;
  };
  auto r = std::make_shared<ReportOpts>();
  report->add_option("--fn", r->fns, "functions (default: all)")->delimiter(',');
  report->add_option("--table", r->table, "a table JSON file instead (from qjit lut fit / lut table)");
  report->add_option("--png", r->png, "also plot abs error vs x (first function, and the seed's SiLU table for silu)");
  report->add_flag("--json", r->json, "JSON output");
  report->footer("abs = |y - f(x)|, rel = abs / max(|f(x)|, 2^-14); f in float64, clamped to ±65504.\n"
                 "'abs |f|<=1' is the max abs error over inputs with |f(x)| <= 1; `lut fit` minimises the chosen metric\n"
                 "over all inputs first, then this one.");
  report->callback([r, &rc] {
    std::vector<std::pair<std::string, lut::Table>> rows;
    if (!r->table.empty()) {
      rows.push_back({r->table, load_table(r->table, "", "default")});
    } else {
      auto fns = r->fns.empty() ? lut::function_names() : r->fns;
      for (auto& fn : fns) {
        rows.push_back({fn + " (qjit)", load_table("", fn, "default")});
        if (fn == "silu") rows.push_back({"silu (seed cuts)", load_table("", fn, "seed")});
      }
    }
    nlohmann::json a = nlohmann::json::array();
    if (!r->json)
      std::cout << fmt("%-22s %11s %11s %13s %11s %11s %11s  %s\n", "table", "max abs", "at x", "abs |f|<=1", "at x",
                       "max rel", "at x", "cut points");
    for (auto& [name, t] : rows) {
      auto e = tuner::lut_error(t);
      if (r->json)
        a.push_back({{"table", name}, {"fn", t.fn}, {"cuts", t.cuts}, {"max_abs", e.max_abs}, {"worst_abs_x", e.worst_abs_x},
                     {"max_abs_small", e.max_abs_small}, {"worst_abs_small_x", e.worst_abs_small_x},
                     {"max_rel", e.max_rel}, {"worst_rel_x", e.worst_rel_x}, {"inputs", e.inputs}});
      else
        std::cout << fmt("%-22s %11.4e %11.5g %13.4e %11.5g %11.4e %11.5g  %s\n", name.c_str(), e.max_abs, e.worst_abs_x,
                         e.max_abs_small, e.worst_abs_small_x, e.max_rel, e.worst_rel_x, cuts_text(t).c_str());
    }
    if (r->json) std::cout << a.dump(2) << "\n";
    else std::cout << "over " << tuner::lut_error(rows[0].second).inputs << " finite fp16 inputs each\n";
    if (!r->png.empty()) {
      std::vector<lut::Table> plot = {rows[0].second};
      if (rows.size() > 1 && rows[1].second.fn == rows[0].second.fn) plot.push_back(rows[1].second);
      const auto& t = plot[0];
      const float lo = t.cuts[0], hi = t.cuts[9] + (t.cuts[9] - t.cuts[8]);
      tuner::write_error_png(r->png, plot, lo, hi);
      std::cerr << fmt("wrote %s: abs error vs x in [%g, %g]; red = %s, blue = %s; light lines = cut points\n",
                       r->png.c_str(), lo, hi, rows[0].first.c_str(), plot.size() > 1 ? rows[1].first.c_str() : "-");
    }
    rc = kOk;
  });

  // ---- fit ----
  auto* fit = lut_cmd->add_subcommand("fit", "search fp16 cut points minimising the max error over all fp16 inputs");
  struct FitOpts {
    std::string fn, metric = "abs", from = "default", out;
    double seconds = 20;
    bool json = false;
  };
  auto f = std::make_shared<FitOpts>();
  fit->add_option("--fn", f->fn, "function")->required();
  fit->add_option("--metric", f->metric, "abs or rel")->capture_default_str();
  fit->add_option("--from", f->from, "start: default or seed (SiLU)")->capture_default_str();
  fit->add_option("--seconds", f->seconds, "time budget")->capture_default_str();
  fit->add_option("-o,--out", f->out, "write the fitted table as JSON here");
  fit->add_flag("--json", f->json, "print the fitted table JSON on stdout");
  fit->callback([f, &rc] {
    lut::Table start = load_table("", f->fn, f->from);
    const auto e0 = tuner::lut_error(start);
    tuner::FitOptions opt;
    opt.metric = f->metric;
    opt.seconds = f->seconds;
    opt.progress = [](int sweep, double best, double small) {
      std::cerr << fmt("  sweep %d: max error %.4e, max abs where |f|<=1 %.4e\n", sweep, best, small);
    };
    std::cerr << fmt("fitting %s (%s error) from %s cut points: max error %.4e\n", f->fn.c_str(), f->metric.c_str(),
                     f->from.c_str(), tuner::lut_objective(e0, f->metric));
    lut::Table best = tuner::fit_cuts(f->fn, start.cuts, opt);
    const auto e = tuner::lut_error(best);
    std::cout << fmt("%s: max abs %.4e (was %.4e), max abs where |f|<=1 %.4e (was %.4e), max rel %.4e (was %.4e)\n"
                     "cuts: %s\n",
                     f->fn.c_str(), e.max_abs, e0.max_abs, e.max_abs_small, e0.max_abs_small, e.max_rel, e0.max_rel,
                     cuts_text(best).c_str());
    const auto j = lut::to_json(best);
    if (!f->out.empty()) {
      std::ofstream(f->out + ".tmp") << j.dump(1) << "\n";
      std::filesystem::rename(f->out + ".tmp", f->out);
      std::cerr << "wrote " << f->out << "\n";
    }
    if (f->json) std::cout << j.dump() << "\n";
    rc = kOk;
  });

  // ---- table ----
  auto* table = lut_cmd->add_subcommand("table", "print a table (cut points + 259 values) as JSON");
  auto t = std::make_shared<std::pair<std::string, std::string>>("", "default");
  table->add_option("--fn", t->first, "function")->required();
  table->add_option("--cuts", t->second, "default or seed (SiLU)")->capture_default_str();
  table->callback([t, &rc] {
    std::cout << lut::to_json(load_table("", t->first, t->second)).dump(1) << "\n";
    rc = kOk;
  });
}

}  // namespace qjit::cli
