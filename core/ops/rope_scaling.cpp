#include "core/ops/rope_scaling.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

// Every float step below is one torch float32 op of HF's and must round where it rounds: no fused
// multiply-add (GCC fuses across statements with -march=native unless told not to).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace gf::ops {

using nlohmann::json;

namespace {

const char* const kTypes = "default, linear, dynamic, yarn, llama3, longrope";

[[noreturn]] void refuse(const std::string& msg) { throw std::invalid_argument(msg); }

std::string num(double v) { return json(v).dump(); }

// The key's value when present and not null (HF's `.get(key)` is None for both).
const json* find(const json& m, const char* key) {
  const auto it = m.find(key);
  return it == m.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& v, const std::string& key, const char* what) {
  if (!v.is_number()) refuse(key + " " + v.dump() + ": expects a number (" + what + ")");
  return v.get<double>();
}

double at_least_one(const json& v, const std::string& key) {
  const double f = number(v, key, "the scaling factor, >= 1");
  if (!(f >= 1.0) || !std::isfinite(f))
    refuse(key + " " + v.dump() + ": must be a number >= 1 (Hugging Face requires factor >= 1: the context "
           "is extended by it)");
  return f;
}

int64_t positive_int(const json& v, const std::string& key) {
  const double d = v.is_number() ? v.get<double>() : 0.0;
  if (!v.is_number() || !(d >= 1) || d != std::floor(d) || d > 9.0e15)
    refuse(key + " " + v.dump() + ": expects a positive integer (a context length in tokens)");
  return static_cast<int64_t>(d);
}

std::vector<double> number_list(const json& v, const std::string& key) {
  if (!v.is_array() || v.empty()) refuse(key + " " + v.dump().substr(0, 80) + ": expects a list of numbers");
  std::vector<double> out;
  for (const json& x : v) {
    if (!x.is_number() || !std::isfinite(x.get<double>()) || x.get<double>() <= 0)
      refuse(key + " holds " + x.dump() + ": expects a list of positive numbers (a divisor per frequency)");
    out.push_back(x.get<double>());
  }
  return out;
}

// The head width a config.json gives (head_dim, else hidden_size / num_attention_heads); 0 if neither.
int64_t config_head_dim(const json& config) {
  if (const json* h = find(config, "head_dim"); h && h->is_number_integer() && h->get<int64_t>() > 0)
    return h->get<int64_t>();
  const json* hs = find(config, "hidden_size");
  const json* nh = find(config, "num_attention_heads");
  if (hs && nh && hs->is_number_integer() && nh->is_number_integer() && nh->get<int64_t>() > 0)
    return hs->get<int64_t>() / nh->get<int64_t>();
  return 0;
}

int64_t rotary_dim_of(int64_t head_dim, double partial_rotary_factor) {
  return static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);  // Python's int(): truncation
}

// One rope map (`where` is "rope_scaling" or "rope_parameters") of config.json object `config`.
RopeScaling read_map(const json& m, const std::string& where, const json& config) {
  RopeScaling s;
  const auto key = [&](const char* k) { return where + "." + k; };
  // BC: "rope_type" was originally "type" (rope_type wins when both are given, as in HF).
  const json* t = find(m, "rope_type");
  const std::string tkey = t ? key("rope_type") : key("type");
  if (!t) t = find(m, "type");
  if (t) {
    if (!t->is_string()) refuse(tkey + " " + t->dump() + ": expects a string, one of " + kTypes);
    s.rope_type = t->get<std::string>();
  }
  if (s.rope_type != "default" && s.rope_type != "linear" && s.rope_type != "dynamic" && s.rope_type != "yarn" &&
      s.rope_type != "llama3" && s.rope_type != "longrope")
    refuse(tkey + " \"" + s.rope_type + "\": not a RoPE type gridformer runs; accepts " + kTypes);

  // partial_rotary_factor: top level (4.x) or in the map (5.x); both must agree.
  const json* ptop = find(config, "partial_rotary_factor");
  const json* pin = find(m, "partial_rotary_factor");
  for (const auto& [p, k] :
       {std::pair{ptop, std::string("partial_rotary_factor")}, {pin, key("partial_rotary_factor")}})
    if (p) {
      const double v = number(*p, k, "the fraction of each head that rotates, in (0, 1]");
      if (!(v > 0 && v <= 1))
        refuse(k + " " + p->dump() + ": must be in (0, 1] (the fraction of each head that rotates)");
      s.partial_rotary_factor = v;
    }
  if (ptop && pin && ptop->get<double>() != pin->get<double>())
    refuse("partial_rotary_factor " + ptop->dump() + " and " + key("partial_rotary_factor") + " " + pin->dump() +
           " disagree (transformers 5.x takes the top-level one): give one");

  const std::string& ty = s.rope_type;
  if (ty == "default") return s;
  // original_max_position_embeddings: a top-level one (Phi-3) first, as 5.x's standardize_rope_params.
  if (ty == "llama3" || ty == "yarn" || ty == "longrope" || ty == "dynamic") {
    const json* otop = ty == "dynamic" ? nullptr : find(config, "original_max_position_embeddings");
    const json* oin = find(m, "original_max_position_embeddings");
    if (oin) s.original_max_position_embeddings = positive_int(*oin, key("original_max_position_embeddings"));
    if (otop) {
      const int64_t v = positive_int(*otop, "original_max_position_embeddings");
      if (oin && v != s.original_max_position_embeddings)
        refuse("original_max_position_embeddings " + otop->dump() + " and " + key("original_max_position_embeddings") +
               " " + oin->dump() + " disagree (transformers 5.x takes the top-level one, 4.x the " + where +
               " one for " + ty + "): give one");
      s.original_max_position_embeddings = v;
    }
  }
  const json* f = find(m, "factor");
  if (ty == "linear" || ty == "dynamic" || ty == "yarn" || ty == "llama3") {
    if (!f)
      refuse(key("factor") + " is missing: rope_type " + ty + " needs a factor >= 1 (the context extension)");
    s.factor = at_least_one(*f, key("factor"));
  }
  if (ty == "llama3") {
    const auto req = [&](const char* k) {
      const json* v = find(m, k);
      if (!v) refuse(key(k) + " is missing: rope_type llama3 needs factor, low_freq_factor, high_freq_factor and "
                     "original_max_position_embeddings (Llama 3.1: 8, 1, 4, 8192)");
      return v;
    };
    s.low_freq_factor = number(*req("low_freq_factor"), key("low_freq_factor"), "llama3's low_freq_factor, e.g. 1");
    s.high_freq_factor = number(*req("high_freq_factor"), key("high_freq_factor"), "llama3's high_freq_factor, e.g. 4");
    // original / low_freq_factor and original / high_freq_factor bound the smoothed band of wavelengths
    // (HF fails on 0). low == high (Llama 4) leaves the band empty; HF only warns for high <= low.
    for (const auto& [k, v] :
         {std::pair{"low_freq_factor", s.low_freq_factor}, {"high_freq_factor", s.high_freq_factor}})
      if (!(v > 0) || !std::isfinite(v))
        refuse(key(k) + " " + num(v) + ": must be > 0 (original / " + k + " is a wavelength in tokens)");
    if (s.original_max_position_embeddings == 0) req("original_max_position_embeddings");
  }
  if (ty == "yarn" || ty == "longrope") {
    if (const json* a = find(m, "attention_factor")) {
      const double v = number(*a, key("attention_factor"), "the cos/sin factor, >= 0");
      if (!(v >= 0) || !std::isfinite(v)) refuse(key("attention_factor") + " " + a->dump() + ": must be >= 0");
      s.attention_factor = v;
    }
  }
  if (ty == "yarn") {
    if (const json* v = find(m, "beta_fast")) s.beta_fast = number(*v, key("beta_fast"), "rotations, default 32");
    if (const json* v = find(m, "beta_slow")) s.beta_slow = number(*v, key("beta_slow"), "rotations, default 1");
    if (const json* v = find(m, "mscale")) s.mscale = number(*v, key("mscale"), "DeepSeek's mscale");
    if (const json* v = find(m, "mscale_all_dim")) s.mscale_all_dim = number(*v, key("mscale_all_dim"), "DeepSeek's");
    if (const json* v = find(m, "truncate")) {
      if (!v->is_boolean()) refuse(key("truncate") + " " + v->dump() + ": expects true or false");
      s.truncate = v->get<bool>();
    }
  }
  if (ty == "longrope") {
    if (f) s.factor = at_least_one(*f, key("factor"));
    for (const char* k : {"short_factor", "long_factor"}) {
      const json* v = find(m, k);
      if (!v) refuse(key(k) + " is missing: rope_type longrope needs short_factor and long_factor (rotary_dim / 2 "
                     "numbers each)");
      (std::string(k) == "short_factor" ? s.short_factor : s.long_factor) = number_list(*v, key(k));
    }
    if (const int64_t hd = config_head_dim(config); hd > 0) {
      const size_t want = static_cast<size_t>(rotary_dim_of(hd, s.partial_rotary_factor) / 2);
      for (const auto& [k, v] : {std::pair{"short_factor", &s.short_factor}, {"long_factor", &s.long_factor}})
        if (v->size() != want)
          refuse(key(k) + " has " + std::to_string(v->size()) + " numbers: expects rotary_dim / 2 = " +
                 std::to_string(want) + " (head_dim " + std::to_string(hd) + ")");
    }
  }
  return s;
}

}  // namespace

RopeConfig read_rope_config(const json& config, double default_theta) {
  if (!config.is_object()) refuse("RoPE: expects a config.json object, got " + config.dump().substr(0, 80));
  RopeConfig rc;
  rc.theta = default_theta;
  if (const json* t = find(config, "rope_theta")) {
    rc.theta = number(*t, "rope_theta", "RoPE's base");
    if (!(rc.theta > 1) || !std::isfinite(rc.theta)) refuse("rope_theta " + t->dump() + ": must be > 1 (RoPE's base)");
  }
  const json* rs = find(config, "rope_scaling");
  const json* rp = find(config, "rope_parameters");
  for (const auto& [p, k] : {std::pair{rs, "rope_scaling"}, {rp, "rope_parameters"}})
    if (p && !p->is_object())
      refuse(std::string(k) + " " + p->dump().substr(0, 80) + ": expects a map such as {\"rope_type\": \"llama3\", "
             "\"factor\": 8.0, ...}, or null");
  if (rp && !rp->empty() && !find(*rp, "rope_type") && !find(*rp, "type") &&
      std::all_of(rp->begin(), rp->end(), [](const json& v) { return v.is_object(); }))
    refuse("rope_parameters " + rp->dump().substr(0, 80) + ": RoPE per layer type (e.g. sliding vs full attention) "
           "is not run here; gridformer runs one RoPE for every layer");
  RopeConfig from_rp = rc;
  std::optional<RopeConfig> from_rs;
  const auto theta_in = [&](const json& m, const std::string& where, RopeConfig& out) {
    if (const json* t = find(m, "rope_theta")) {
      const double v = number(*t, where + ".rope_theta", "RoPE's base");
      if (!(v > 1) || !std::isfinite(v)) refuse(where + ".rope_theta " + t->dump() + ": must be > 1 (RoPE's base)");
      if (find(config, "rope_theta") && v != rc.theta)
        refuse("rope_theta " + num(rc.theta) + " and " + where + ".rope_theta " + t->dump() +
               " disagree (transformers 4.x reads the top-level one, 5.x the other): give one");
      out.theta = v;
    }
  };
  if (rp) {
    from_rp.scaling = read_map(*rp, "rope_parameters", config);
    theta_in(*rp, "rope_parameters", from_rp);
  } else {
    from_rp.scaling = read_map(json::object(), "rope_scaling", config);  // the default (and partial_rotary_factor)
  }
  if (!rs) return from_rp;
  from_rs = rc;
  from_rs->scaling = read_map(*rs, "rope_scaling", config);
  theta_in(*rs, "rope_scaling", *from_rs);
  if (rp && !(*from_rs == from_rp))
    refuse("rope_scaling (" + from_rs->scaling.describe() + ", rope_theta " + num(from_rs->theta) +
           ") and rope_parameters (" + from_rp.scaling.describe() + ", rope_theta " + num(from_rp.theta) +
           ") disagree: transformers takes rope_scaling when it is not null; give one of them");
  return *from_rs;
}

RopeScaling read_rope_scaling(const json& config) { return read_rope_config(config, 10000.0).scaling; }

std::string RopeScaling::describe() const {
  std::string d = "rope " + rope_type;
  const auto add = [&](const char* k, double v) { d += std::string(" ") + k + " " + num(v); };
  if (rope_type != "default") {
    if (factor != 0) add("factor", factor);
    if (original_max_position_embeddings != 0)
      d += " original_max_position_embeddings " + std::to_string(original_max_position_embeddings);
  }
  if (rope_type == "llama3") add("low_freq_factor", low_freq_factor), add("high_freq_factor", high_freq_factor);
  if (rope_type == "yarn") {
    add("beta_fast", beta_fast), add("beta_slow", beta_slow);
    if (mscale != 0 || mscale_all_dim != 0) add("mscale", mscale), add("mscale_all_dim", mscale_all_dim);
    if (!truncate) d += " truncate false";
  }
  if ((rope_type == "yarn" || rope_type == "longrope") && attention_factor) add("attention_factor", *attention_factor);
  if (rope_type == "longrope")
    d += " short_factor[" + std::to_string(short_factor.size()) + "] long_factor[" +
         std::to_string(long_factor.size()) + "]";
  if (partial_rotary_factor != 1.0) add("partial_rotary_factor", partial_rotary_factor);
  return d;
}

json rope_scaling_json(const RopeScaling& s) {
  if (s.rope_type == "default") return nullptr;
  json m{{"rope_type", s.rope_type}};
  if (s.factor != 0) m["factor"] = s.factor;
  if (s.original_max_position_embeddings != 0)
    m["original_max_position_embeddings"] = s.original_max_position_embeddings;
  if (s.rope_type == "llama3") m["low_freq_factor"] = s.low_freq_factor, m["high_freq_factor"] = s.high_freq_factor;
  if (s.rope_type == "yarn") {
    m["beta_fast"] = s.beta_fast;  // written at their defaults too, as DeepSeek's and gpt-oss's files spell them
    m["beta_slow"] = s.beta_slow;
    if (s.mscale != 0) m["mscale"] = s.mscale;
    if (s.mscale_all_dim != 0) m["mscale_all_dim"] = s.mscale_all_dim;
    if (!s.truncate) m["truncate"] = false;
  }
  if ((s.rope_type == "yarn" || s.rope_type == "longrope") && s.attention_factor)
    m["attention_factor"] = *s.attention_factor;
  if (s.rope_type == "longrope") m["short_factor"] = s.short_factor, m["long_factor"] = s.long_factor;
  return m;
}

void write_rope_config(json& config, const RopeConfig& rc) {
  if (config.is_null()) config = json::object();
  if (!config.is_object())
    refuse("write_rope_config: expects a config.json object, got " + config.dump().substr(0, 80));
  for (const char* k : {"rope_parameters", "rope_scaling", "partial_rotary_factor", "original_max_position_embeddings"})
    config.erase(k);
  config["rope_theta"] = rc.theta;
  config["rope_scaling"] = rope_scaling_json(rc.scaling);
  if (rc.scaling.partial_rotary_factor != 1.0) config["partial_rotary_factor"] = rc.scaling.partial_rotary_factor;
  // transformers 4.x reads longrope's pretraining length at the top level only (Phi-3).
  if (rc.scaling.rope_type == "longrope" && rc.scaling.original_max_position_embeddings != 0)
    config["original_max_position_embeddings"] = rc.scaling.original_max_position_embeddings;
}

namespace {

// base ** (arange(0, dim, 2).float() / dim): the base rounded to float32 (Tensor.__rpow__), the
// exponent a float32 quotient, then float32 pow. (torch's AVX2 pow is SLEEF's, within 1 ulp of this
// correctly rounded glibc powf: see tests/core/rope_scaling_test.cpp for how often they differ.)
float pos_freq(double base, int64_t i, int64_t dim) {
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
  return std::pow(static_cast<float>(base), exponent);
}

// `c / tensor` in torch is tensor.reciprocal() * c: two float32 roundings.
float rdiv(double c, float t) {
  const float r = 1.0f / t;
  return r * static_cast<float>(c);
}

double get_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

}  // namespace

RopeFrequencies rope_frequencies(int64_t head_dim, double theta, const RopeScaling& s, int64_t max_position_embeddings,
                                 int64_t seq_len) {
  const int64_t dim = rotary_dim_of(head_dim, s.partial_rotary_factor);  // HF's int(head_dim * partial_rotary_factor)
  if (dim < 2 || dim % 2 != 0)
    refuse("RoPE: rotary_dim " + std::to_string(dim) + " (head_dim " + std::to_string(head_dim) +
           " x partial_rotary_factor " + num(s.partial_rotary_factor) + ") must be even and >= 2");
  if (max_position_embeddings <= 0) refuse("RoPE: max_position_embeddings must be > 0");
  const int64_t half = dim / 2;
  const std::string& ty = s.rope_type;
  const int64_t original = s.original_max_position_embeddings ? s.original_max_position_embeddings
                                                              : max_position_embeddings;
  if ((ty == "linear" || ty == "dynamic" || ty == "llama3") && !(s.factor >= 1))
    refuse("RoPE " + ty + ": factor " + num(s.factor) + " must be >= 1");
  RopeFrequencies f;
  f.rotary_dim = dim;
  f.inv_freq.resize(static_cast<size_t>(half));
  double attention = 1.0;
  if (ty == "default" || ty == "linear") {
    for (int64_t i = 0; i < half; ++i) {
      float inv = 1.0f / pos_freq(theta, i, dim);
      if (ty == "linear") inv = inv / static_cast<float>(s.factor);  // inv_freq /= factor
      f.inv_freq[static_cast<size_t>(i)] = inv;
    }
  } else if (ty == "dynamic") {
    if (dim == 2) refuse("RoPE dynamic: rotary_dim 2 (HF divides by dim - 2)");
    // seq_len = max(seq_len, max_position_embeddings); the new base in Python doubles.
    const double len = static_cast<double>(std::max(seq_len, max_position_embeddings));
    const double mpe = static_cast<double>(max_position_embeddings);
    const double base = theta * std::pow((s.factor * len / mpe) - (s.factor - 1),
                                         static_cast<double>(dim) / static_cast<double>(dim - 2));
    for (int64_t i = 0; i < half; ++i) f.inv_freq[static_cast<size_t>(i)] = 1.0f / pos_freq(base, i, dim);
  } else if (ty == "yarn") {
    // 5.x: the given factor; the ratio only without one.
    const double factor = s.factor != 0 ? s.factor
                                        : static_cast<double>(max_position_embeddings) / static_cast<double>(original);
    if (!(factor > 0)) refuse("RoPE yarn: factor " + num(factor) + " must be > 0");
    if (s.attention_factor) attention = *s.attention_factor;
    else if (s.mscale != 0 && s.mscale_all_dim != 0)
      attention = get_mscale(factor, s.mscale) / get_mscale(factor, s.mscale_all_dim);
    else attention = get_mscale(factor, 1.0);
    const double beta_fast = s.beta_fast != 0 ? s.beta_fast : 32.0;  // `get("beta_fast") or 32`
    const double beta_slow = s.beta_slow != 0 ? s.beta_slow : 1.0;
    // find_correction_dim: the dimension at which a wavelength turns num_rotations times over `original`.
    const auto correction_dim = [&](double num_rotations) {
      return (static_cast<double>(dim) *
              std::log(static_cast<double>(original) / (num_rotations * 2 * std::numbers::pi))) /
             (2 * std::log(theta));
    };
    double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
    if (s.truncate) low = std::floor(low), high = std::ceil(high);
    low = std::max(low, 0.0), high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;  // linear_ramp_factor: prevent singularity
    const float lo = static_cast<float>(low), span = static_cast<float>(high - low);
    const float ffactor = static_cast<float>(factor);
    for (int64_t i = 0; i < half; ++i) {
      const float pos = pos_freq(theta, i, dim);
      const float extrapolation = 1.0f / pos, interpolation = 1.0f / (ffactor * pos);
      const float ramp = std::clamp((static_cast<float>(i) - lo) / span, 0.0f, 1.0f);
      const float extrapolation_factor = 1.0f - ramp;  // 1 at the fast (short-wavelength) end: left as is
      const float a = interpolation * (1.0f - extrapolation_factor);
      const float b = extrapolation * extrapolation_factor;
      f.inv_freq[static_cast<size_t>(i)] = a + b;
    }
  } else if (ty == "longrope") {
    if (s.short_factor.size() != static_cast<size_t>(half) || s.long_factor.size() != static_cast<size_t>(half))
      refuse("RoPE longrope: short_factor has " + std::to_string(s.short_factor.size()) + " and long_factor " +
             std::to_string(s.long_factor.size()) + " numbers; rotary_dim / 2 = " + std::to_string(half) + " each");
    const double factor = s.factor != 0 ? s.factor
                                        : static_cast<double>(max_position_embeddings) / static_cast<double>(original);
    if (s.attention_factor) attention = *s.attention_factor;
    else attention = factor <= 1.0 ? 1.0 : std::sqrt(1 + std::log(factor) / std::log(static_cast<double>(original)));
    const std::vector<double>& ext = seq_len > original ? s.long_factor : s.short_factor;
    for (int64_t i = 0; i < half; ++i) {
      const float scaled = static_cast<float>(ext[static_cast<size_t>(i)]) * pos_freq(theta, i, dim);
      f.inv_freq[static_cast<size_t>(i)] = 1.0f / scaled;
    }
  } else if (ty == "llama3") {
    if (!(s.low_freq_factor > 0) || !(s.high_freq_factor > 0)) refuse("RoPE llama3: low/high_freq_factor must be > 0");
    if (s.original_max_position_embeddings == 0) refuse("RoPE llama3: original_max_position_embeddings is unset");
    const double old_context = static_cast<double>(s.original_max_position_embeddings);
    const float low_wavelen = static_cast<float>(old_context / s.low_freq_factor);    // 8192: longer ones / factor
    const float high_wavelen = static_cast<float>(old_context / s.high_freq_factor);  // 2048: shorter ones kept
    const float ffactor = static_cast<float>(s.factor), flow = static_cast<float>(s.low_freq_factor);
    const float band = static_cast<float>(s.high_freq_factor - s.low_freq_factor);  // 0 (Llama 4): inf/nan, unused
    for (int64_t i = 0; i < half; ++i) {
      const float inv = 1.0f / pos_freq(theta, i, dim);
      const float wavelen = rdiv(2 * std::numbers::pi, inv);
      const float llama = wavelen > low_wavelen ? inv / ffactor : inv;
      const float smooth = (rdiv(old_context, wavelen) - flow) / band;
      const float a = ((1.0f - smooth) * llama) / ffactor;
      const float b = smooth * llama;
      const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
      f.inv_freq[static_cast<size_t>(i)] = medium ? a + b : llama;
    }
  } else {
    refuse("RoPE: rope_type \"" + ty + "\" is not one of " + kTypes);
  }
  f.attention_scaling = static_cast<float>(attention);  // `cos * attention_scaling` rounds it to float32
  return f;
}

}  // namespace gf::ops
