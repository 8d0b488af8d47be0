// The plan export applies a weight's transforms while it streams the weight, and the
// runtime reads back exactly the transformed bytes.
#include "compiler/Registration.h"
#include "compiler/lowering/ExportPlan.h"
#include "cpu/Session.h"
#include "frontends/onnx/OnnxImporter.h"
#include "plan/PlanFile.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

namespace {

TEST(ExportPlanTest, WeightTransformsReachTheSection) {
  mlir::DialectRegistry registry;
  dsc::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  // The model only provides the initializer "w" = [[1, 2, 3], [4, 5, 6]].
  auto imported = dsc::onnx_frontend::importModelBuffer(context, R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,3] w = {1.0, 2.0, 3.0, 4.0, 5.0, 6.0}) => (float[2,3] y) {
      y = Identity(w)
    })", "transforms.onnxtxt");
  ASSERT_TRUE(mlir::succeeded(imported));

  // Column 2 of w as a [1, 2] row: transpose to [3, 2], then rows [2, 3).
  auto module = mlir::parseSourceString<mlir::ModuleOp>(R"mlir(
    plan.arena @arena size 64 align 64
    plan.program @forward {
      %w = plan.weight_tensor "w" {source_type = tensor<2x3xf32>,
             transforms = [{kind = "transpose", perm = [1, 0]},
                           {kind = "slice", axis = 0 : i64, offset = 2 : i64, size = 1 : i64}]}
             : tensor<1x2xf32>
      %r = plan.exec "Identity"(%w) {max_shapes = [array<i64: 1, 2>], arena_offsets = array<i64: 0>}
             : (tensor<1x2xf32>) -> tensor<1x2xf32>
      plan.return {names = ["r"]} %r : tensor<1x2xf32>
    })mlir", &context);
  ASSERT_TRUE(module);

  std::string path = (std::filesystem::temp_directory_path() / "dsc-export-transforms.dsp").string();
  dsc::ExportOptions options;
  options.weightDtype = "fp16";  // the stored shard is also converted
  ASSERT_TRUE(mlir::succeeded(dsc::exportPlan(*module, *imported->weights, options, path)));

  std::unique_ptr<dsrt::PlanFile> file;
  dsrt::Status status = dsrt::PlanFile::open(path, file);
  ASSERT_TRUE(status.isOk()) << status.message();
  const dsrt::PlanSection *section = nullptr;
  ASSERT_TRUE(file->section(0, section).isOk());
  ASSERT_EQ(section->weightCount(), 1u);
  dsrt::TensorRef stored = section->weight(0);
  EXPECT_EQ(stored.dtype, dsrt::DType::F16);
  EXPECT_EQ(stored.shape, (dsrt::Shape{1, 2}));
  const uint16_t *halves = static_cast<const uint16_t *>(stored.data);
  EXPECT_EQ(dsrt::halfToFloat(halves[0]), 3.0f);
  EXPECT_EQ(dsrt::halfToFloat(halves[1]), 6.0f);

  // The program computes in f32: the session widens the stored halves.
  std::unique_ptr<dsrt::CpuSession> session;
  ASSERT_TRUE(dsrt::CpuSession::create(std::shared_ptr<dsrt::PlanFile>(std::move(file)), 0, session)
                  .isOk());
  ASSERT_TRUE(session->run("forward").isOk());
  dsrt::TensorRef out;
  ASSERT_TRUE(session->output("forward", 0, out).isOk());
  EXPECT_EQ(out.shape, (dsrt::Shape{1, 2}));
  EXPECT_EQ(out.as<float>()[0], 3.0f);
  EXPECT_EQ(out.as<float>()[1], 6.0f);
  std::remove(path.c_str());
}

} // namespace
