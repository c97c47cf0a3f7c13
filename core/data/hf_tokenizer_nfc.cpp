// The NFC tables of HFTokenizer's NFC normalizer (hf_tokenizer.h, "NFC tables"): Unicode 9.0's, as Hugging Face's
// tokenizers computes NFC (its unicode-normalization-alignments tables), by default, or ICU's own (GF_HF_NFC=unicode).
#include <unicode/normalizer2.h>
#include <unicode/uniset.h>

#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

#include "core/data/hf_tokenizer_impl.h"

namespace gf::data::hf {

NfcTables nfc_tables_from_environment() {
  const char* env = std::getenv("GF_HF_NFC");
  const std::string value = env == nullptr ? "" : env;
  if (value.empty() || value == "tokenizers") return NfcTables::kTokenizers;
  if (value == "unicode") return NfcTables::kUnicode;
  throw std::runtime_error("GF_HF_NFC='" + value + "' is not known (tokenizers: NFC as Hugging Face's tokenizers computes it, "
                           "with Unicode 9.0 tables, the default; unicode: Unicode's NFC, ICU's tables)");
}

namespace {

// ICU's NFC over the characters Unicode 9.0 had assigned. A character outside the set is copied as
// it is and the text on each side of it is normalized on its own: what the crate does with a
// character its tables lack (combining class 0, no decomposition, no composition). For the
// characters in the set the crate's 9.0 tables and ICU's agree (Unicode's normalization stability
// policy); checked on NormalizationTest.txt against tokenizers 0.23.2 (tools/hf_nfc_check.py).
struct TokenizersNfc {
  UErrorCode status = U_ZERO_ERROR;
  icu::UnicodeSet unicode_9_0{icu::UnicodeString(u"[:Age=9.0:]"), status};
  std::unique_ptr<icu::FilteredNormalizer2> normalizer;
  TokenizersNfc() {
    const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
    if (U_FAILURE(status)) return;
    unicode_9_0.freeze();
    normalizer = std::make_unique<icu::FilteredNormalizer2>(*nfc, unicode_9_0);
  }
};

}  // namespace

const icu::Normalizer2& nfc_normalizer(NfcTables tables) {
  if (tables == NfcTables::kUnicode) {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
    if (U_FAILURE(status)) throw std::runtime_error(std::string("ICU's NFC normalizer is unavailable: ") + u_errorName(status));
    return *nfc;
  }
  static const TokenizersNfc instance;
  if (U_FAILURE(instance.status) || !instance.normalizer)
    throw std::runtime_error(std::string("ICU's NFC normalizer is unavailable: ") + u_errorName(instance.status));
  return *instance.normalizer;
}

}  // namespace gf::data::hf
