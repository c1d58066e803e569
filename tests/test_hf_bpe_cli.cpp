// A lat model with a byte-level BPE tokenizer.json, through `lat export --format hf` and back
// on the command line: `lat generate --prompt` from the directory prints what the run itself
// prints, and `init_from: DIR` without data.tokenizer fine-tunes on text with the directory's
// own tokenizer (the resolved config names DIR as data.tokenizer); a model of token ids has no
// tokenizer to default to, and text is then refused before the run directory exists.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "data/tokenizer.h"
#include "tests/expect_error.h"
#include "tests/lat_command.h"
#include "tests/test_files.h"
#include "train/config/config.h"
#include "train/files/hf_tokenizer.h"

namespace fs = std::filesystem;

namespace {

using namespace lat::testing;

// Accents, CJK, an emoji (4 UTF-8 bytes), a newline; "the" for the merges.
const std::string kText = "the café naïve 中文 🙂 there\n";

/// Model keys that Qwen3.5 expresses and that read back from its config.json unchanged.
const std::string kModel =
    "model: {d_model: 16, n_layers: 2, n_heads: 2, layers: \"gdn,attn\", norm_zero_centered: true, "
    "attn: {output_gate: true, qk_norm: true}}\n";

class HfBpeCliTest : public TempDirTest {
 protected:
  CliResult lat(const std::string& args) const { return run_lat_captured(args, dir_); }

  /// A byte-level BPE tokenizer.json: the 256 byte tokens plus the merges "t h" and "th e".
  std::string write_bpe_tokenizer() const {
    nlohmann::ordered_json bpe = lat::hf_tokenizer_json(lat::Tokenizer::byte());
    bpe["model"]["vocab"]["th"] = 256;
    bpe["model"]["vocab"]["the"] = 257;
    bpe["model"]["merges"] = nlohmann::json::array({"t h", "th e"});
    return write("bpe.json", bpe.dump());
  }

  /// `lat train` of a config with `head` (model keys, init_from, data.tokenizer) into out_dir.
  CliResult train(const std::string& name, const std::string& head, const std::string& out_dir) const {
    write(name, head + "data: {path: '" + path("corpus.txt") + "', block_size: 16}\n" +
                    "train: {threads: 1, batch_size: 2, max_steps: 2, eval_every: 2, eval_batches: 1, "
                    "ckpt_every: 2, lr: 1.0e-2, out_dir: '" + path(out_dir) + "'}\n");
    return lat("train '" + path(name) + "'");
  }

  std::string generate(const std::string& checkpoint) const {
    const CliResult r = lat("generate --checkpoint '" + checkpoint + "' --prompt 'the café 中' --temperature 0 "
                            "--max-new-tokens 8");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  }
};

TEST_F(HfBpeCliTest, HfExportGeneratesTextAndFineTunesWithItsOwnTokenizer) {
  std::string corpus;
  for (int i = 0; i < 30; ++i) corpus += kText;
  write("corpus.txt", corpus);
  const std::string tokenizer = write_bpe_tokenizer();
  const CliResult base = train("base.yaml", kModel + "data.tokenizer: '" + tokenizer + "'\n", "base");
  ASSERT_EQ(base.exit_code, 0) << base.err;
  const CliResult exported = lat("export --checkpoint '" + path("base") + "' --format hf --out '" + path("hf") + "'");
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  EXPECT_EQ(read_bytes(path("hf/tokenizer.json")), read_bytes(tokenizer));

  // "the" is one token (257): the file's merges, not its bytes.
  const CliResult ids = lat("tokenizer encode --tokenizer '" + path("hf") + "' --text 'the the'");
  EXPECT_EQ(ids.out, "257 32 257\n");
  const std::string text = generate(path("hf"));
  EXPECT_EQ(text.rfind("the café 中", 0), 0u) << text;
  EXPECT_GT(text.size(), std::string("the café 中\n").size());
  EXPECT_EQ(text, generate(path("base")));

  // No data.tokenizer: the directory's own tokenizer.json encodes the text.
  const CliResult tuned = train("tune.yaml", kModel + "init_from: '" + path("hf") + "'\n", "tuned");
  ASSERT_EQ(tuned.exit_code, 0) << tuned.err;
  EXPECT_NE(read_bytes(path("tuned/config.yaml")).find("tokenizer: \"" + path("hf") + "\""), std::string::npos)
      << read_bytes(path("tuned/config.yaml"));
  const CliResult tuned_ids = lat("tokenizer encode --tokenizer '" + path("tuned") + "' --text 'the the'");
  EXPECT_EQ(tuned_ids.out, "257 32 257\n");
}

TEST_F(HfBpeCliTest, DataTokenizerDefaultsToInitFromOnlyWhenUnset) {
  write("corpus.txt", kText);
  fs::create_directory(path("model"));
  const std::string data = "data: {path: '" + path("corpus.txt") + "'}\n";
  EXPECT_EQ(lat::load_config(write("a.yaml", "init_from: '" + path("model") + "'\n" + data)).data.tokenizer,
            path("model"));
  EXPECT_EQ(lat::load_config(write("b.yaml", "init_from: '" + path("model") + "'\n" + data + "data.tokenizer: byte\n"))
                .data.tokenizer,
            "byte");
  EXPECT_EQ(lat::load_config(write("c.yaml", data)).data.tokenizer, "char");
  // A missing init_from is named as such, not as the data.tokenizer it stands for.
  const std::string missing = write("d.yaml", "init_from: '" + path("nowhere") + "'\n" + data);
  expect_error<lat::ConfigError>([&] { lat::load_config(missing); },
                                 {"init_from: no such checkpoint: '" + path("nowhere") + "'"});
}

TEST_F(HfBpeCliTest, InitFromAModelOfTokenIdsRefusesTextWithoutATokenizer) {
  std::string ids;  // uint16 ids 0..9, little-endian
  for (int i = 0; i < 400; ++i) ids += std::string{static_cast<char>(i % 10), '\0'};
  write("ids.bin", ids);
  write("corpus.txt", kText);
  write("base.yaml", kModel + "data: {path: '" + path("ids.bin") + "', block_size: 16}\n" +
                         "train: {threads: 1, batch_size: 2, max_steps: 1, eval_every: 1, eval_batches: 1, "
                         "ckpt_every: 1, out_dir: '" + path("base") + "'}\n");
  const CliResult base = lat("train '" + path("base.yaml") + "'");
  ASSERT_EQ(base.exit_code, 0) << base.err;
  const CliResult tuned = train("tune.yaml", kModel + "init_from: '" + path("base") + "'\n", "tuned");
  EXPECT_EQ(tuned.exit_code, 2);
  EXPECT_NE(tuned.err.find("init_from: the model was trained on token ids and has no tokenizer (type 'none'): set "
                           "data.tokenizer (char, byte or a tokenizer file) to train it on text"),
            std::string::npos)
      << tuned.err;
  EXPECT_FALSE(fs::exists(path("tuned")));
}

}  // namespace
