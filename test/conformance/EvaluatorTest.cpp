// The evaluator (compiler/evaluate): attribute conversion, full evaluation of If and of the
// errors, and shape evaluation (value-carrying shape chains, unknown conditions, and
// agreement with full evaluation on the committed HuggingFace fixtures).
#include "TensorFiles.h"
#include "compiler/evaluate/Evaluator.h"
#include "frontends/onnx/OnnxImporter.h"

#include "dialects/onnx/IR/OnnxDialect.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <cstring>

namespace dsc::evaluate {
namespace {

using dsrt::DType;
using dsrt::OwnedTensor;
using dsrt::Shape;

class EvaluatorTest : public ::testing::Test {
protected:
  EvaluatorTest()
      : handler_(&context_, [this](mlir::Diagnostic &diagnostic) {
          diagnostics_ += diagnostic.str() + "\n";
          return mlir::success();
        }) {}

  // Imports a model in the ONNX text syntax.
  mlir::func::FuncOp importText(const std::string &text) {
    auto imported = onnx_frontend::importModelBuffer(context_, text, "test.onnxtxt",
                                                     onnx_frontend::ModelSyntax::Text);
    EXPECT_TRUE(mlir::succeeded(imported)) << diagnostics_;
    if (mlir::failed(imported))
      return nullptr;
    model_ = std::move(*imported);
    return model_.module->lookupSymbol<mlir::func::FuncOp>("main");
  }

  mlir::func::FuncOp importFixture(const std::string &name) {
    auto imported = onnx_frontend::importModelFile(
        context_, std::string(DSC_MODELS_DIR) + "/" + name + "/model.onnx");
    EXPECT_TRUE(mlir::succeeded(imported)) << diagnostics_;
    if (mlir::failed(imported))
      return nullptr;
    model_ = std::move(*imported);
    return model_.module->lookupSymbol<mlir::func::FuncOp>("main");
  }

  std::vector<OwnedTensor> fixtureInputs(const std::string &name, mlir::func::FuncOp main) {
    std::vector<OwnedTensor> inputs;
    for (unsigned i = 0; i < main.getNumArguments(); ++i) {
      inputs.emplace_back();
      std::string error;
      auto type = mlir::cast<mlir::TensorType>(main.getArgumentTypes()[i]);
      EXPECT_TRUE(conformance::readTensorFile(
          std::string(DSC_MODELS_DIR) + "/" + name + "/test_data_set_0/input_" +
              std::to_string(i) + ".pb",
          toDType(type.getElementType()), inputs.back(), error))
          << error;
    }
    return inputs;
  }

  mlir::MLIRContext context_;
  std::string diagnostics_;
  mlir::ScopedDiagnosticHandler handler_;
  onnx_frontend::ImportedModel model_;
};

template <typename T> OwnedTensor tensorOf(DType dtype, Shape shape, std::vector<T> values) {
  OwnedTensor t(dtype, std::move(shape));
  std::memcpy(t.storage.data(), values.data(), t.storage.size());
  return t;
}

template <typename T> std::vector<T> valuesOf(const OwnedTensor &t) {
  std::vector<T> out(t.storage.size() / sizeof(T));
  std::memcpy(out.data(), t.storage.data(), t.storage.size());
  return out;
}

ValueInfo shapeOnly(DType dtype, Shape shape) {
  ValueInfo info;
  info.dtype = dtype;
  info.shape = std::move(shape);
  return info;
}

TEST_F(EvaluatorTest, EveryDialectOpHasAKernel) {
  onnx_frontend::loadImportDialects(context_);
  int ops = 0;
  for (mlir::RegisteredOperationName name : context_.getRegisteredOperations()) {
    if (name.getDialectNamespace() != "onnx")
      continue;
    llvm::StringRef op = name.stripDialect();
    if (op == "Weight" || op == "Constant" || op == "NoValue" || op == "If" || op == "Yield")
      continue;
    ++ops;
    EXPECT_TRUE(dsrt::ops::isSupported(op.str())) << op.str();
  }
  // The rest are the recognised tfm ops, which the evaluator never meets.
  std::vector<std::string> all = dsrt::ops::supportedOps();
  EXPECT_EQ(static_cast<size_t>(ops),
            std::count_if(all.begin(), all.end(), [](const std::string &op) {
              return op.rfind("tfm.", 0) != 0;
            }));
}

TEST_F(EvaluatorTest, ConvertsAttributes) {
  mlir::func::FuncOp main = importText(R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,3] x, int64[2] s) => (int64[3,2] a, int64[2,3] b, float[2,3] c) {
      t = Transpose<perm = [1, 0]>(x)
      a = Cast<to = 7>(t)
      b = ConstantOfShape<value = int64[1] {5}>(s)
      scale = Constant<value = float[3] {1, 1, 1}>()
      c = LayerNormalization<epsilon = 0.25, axis = -1>(x, scale)
    })");
  ASSERT_TRUE(main);
  std::map<std::string, dsrt::ops::AttrMap> byOp;
  main.walk([&](mlir::Operation *op) {
    byOp[op->getName().stripDialect().str()] = toAttrMap(op);
  });
  EXPECT_EQ(byOp["Cast"].at("to").kind, dsrt::ops::Attr::Kind::Type);
  EXPECT_EQ(byOp["Cast"].at("to").type, DType::I64);
  EXPECT_EQ(byOp["Transpose"].at("perm").ints, (std::vector<int64_t>{1, 0}));
  const dsrt::ops::Attr &value = byOp["ConstantOfShape"].at("value");
  ASSERT_EQ(value.kind, dsrt::ops::Attr::Kind::Tensor);
  EXPECT_EQ(value.tensor.dtype, DType::I64);
  EXPECT_EQ(valuesOf<int64_t>(value.tensor), (std::vector<int64_t>{5}));
  EXPECT_EQ(byOp["LayerNormalization"].at("epsilon").f, 0.25f);
  EXPECT_EQ(byOp["LayerNormalization"].at("axis").i, -1);
}

TEST_F(EvaluatorTest, RunsIfAndNamesFailingNodes) {
  mlir::func::FuncOp main = importText(R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (bool[1] cond, float[2] x) => (float[2] y) {
      y = If (cond) <then_branch = g1 () => (float[2] a) { a = Identity(x) },
                     else_branch = g2 () => (float[2] b) { b = Neg(x) }>
    })");
  ASSERT_TRUE(main);
  OwnedTensor x = tensorOf<float>(DType::F32, {2}, {1, -2});
  for (uint8_t cond : {1, 0}) {
    std::vector<OwnedTensor> outputs;
    dsrt::Status status = evaluateFunction(
        main, model_.weights.get(), {tensorOf<uint8_t>(DType::Bool, {1}, {cond}), x}, outputs);
    ASSERT_TRUE(status.isOk()) << status.message();
    std::vector<float> expected = cond ? std::vector<float>{1, -2} : std::vector<float>{-1, 2};
    EXPECT_EQ(valuesOf<float>(outputs[0]), expected);
  }
  std::vector<OwnedTensor> outputs;
  dsrt::Status status = evaluateFunction(main, nullptr, {x}, outputs);
  EXPECT_NE(status.message().find("2 arguments, but 1 inputs"), std::string::npos);
  status = evaluateFunction(main, nullptr, {x, x}, outputs);
  EXPECT_NE(status.message().find("does not fit its type"), std::string::npos);

  main = importText(R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[4] x, int64[1] i) => (float[1] y) { y = Gather(x, i) })");
  ASSERT_TRUE(main);
  status = evaluateFunction(
      main, nullptr, {tensorOf<float>(DType::F32, {4}, {1, 2, 3, 4}),
                      tensorOf<int64_t>(DType::I64, {1}, {4})}, outputs);
  EXPECT_NE(status.message().find("onnx.Gather at 'Gather #0': Gather: index 4 is out of range"),
            std::string::npos)
      << status.message();
}

TEST_F(EvaluatorTest, ShapeChainsKeepTheirValues) {
  mlir::func::FuncOp main = importText(R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[N, 6] x) => (float[N, 2, 3] y) {
      s = Shape(x)
      zero = Constant<value = int64 {0}>()
      n = Gather(s, zero)
      axes = Constant<value = int64[1] {0}>()
      n1 = Unsqueeze(n, axes)
      tail = Constant<value = int64[2] {-1, 3}>()
      shape = Concat<axis = 0>(n1, tail)
      y = Reshape(x, shape)
    })");
  ASSERT_TRUE(main);
  ValueInfoMap results;
  dsrt::Status status =
      evaluateShapes(main, nullptr, {shapeOnly(DType::F32, {4, 6})}, results);
  ASSERT_TRUE(status.isOk()) << status.message();
  mlir::Value returned = main.getBody().front().getTerminator()->getOperand(0);
  EXPECT_EQ(results[returned].shape, (Shape{4, 2, 3}));
  EXPECT_FALSE(results[returned].value.has_value());
  mlir::Operation *concat = returned.getDefiningOp()->getOperand(1).getDefiningOp();
  const ValueInfo &shape = results[concat->getResult(0)];
  ASSERT_TRUE(shape.value.has_value());
  EXPECT_EQ(valuesOf<int64_t>(*shape.value), (std::vector<int64_t>{4, -1, 3}));
  EXPECT_TRUE(results.count(main.getArgument(0)));
}

TEST_F(EvaluatorTest, ShapeEvaluationNeedsShapeValues) {
  mlir::func::FuncOp main = importText(R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[6] x, int64[2] s) => (float[?, ?] y) { y = Reshape(x, s) })");
  ASSERT_TRUE(main);
  ValueInfoMap results;
  dsrt::Status status = evaluateShapes(
      main, nullptr, {shapeOnly(DType::F32, {6}), shapeOnly(DType::I64, {2})}, results);
  EXPECT_NE(status.message().find("'Reshape #0'"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("'shape' is unknown"), std::string::npos);
  ValueInfo known = shapeOnly(DType::I64, {2});
  known.value = tensorOf<int64_t>(DType::I64, {2}, {3, 2});
  status = evaluateShapes(main, nullptr, {shapeOnly(DType::F32, {6}), known}, results);
  ASSERT_TRUE(status.isOk()) << status.message();
  mlir::Value returned = main.getBody().front().getTerminator()->getOperand(0);
  EXPECT_EQ(results[returned].shape, (Shape{3, 2}));
}

TEST_F(EvaluatorTest, UnknownConditionGivesTheLargerBranch) {
  mlir::func::FuncOp main = importText(R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (bool[1] cond, float[2,3] x) => (float[?,3] y) {
      y = If (cond) <then_branch = g1 () => (float[2,3] a) { a = Identity(x) },
                     else_branch = g2 () => (float[4,3] b) { b = Concat<axis = 0>(x, x) }>
    })");
  ASSERT_TRUE(main);
  mlir::Value returned = main.getBody().front().getTerminator()->getOperand(0);
  ValueInfoMap results;
  std::vector<ValueInfo> inputs = {shapeOnly(DType::Bool, {1}), shapeOnly(DType::F32, {2, 3})};
  ASSERT_TRUE(evaluateShapes(main, nullptr, inputs, results).isOk());
  EXPECT_EQ(results[returned].shape, (Shape{4, 3}));
  inputs[0].value = tensorOf<uint8_t>(DType::Bool, {1}, {1});
  ASSERT_TRUE(evaluateShapes(main, nullptr, inputs, results).isOk());
  EXPECT_EQ(results[returned].shape, (Shape{2, 3}));
}

// Shape evaluation without any input values gives the shapes that running the model does.
class FixtureShapes : public EvaluatorTest,
                      public ::testing::WithParamInterface<const char *> {};

TEST_P(FixtureShapes, AgreeWithFullEvaluation) {
  std::string name = GetParam();
  mlir::func::FuncOp main = importFixture(name);
  ASSERT_TRUE(main);
  std::vector<OwnedTensor> inputs = fixtureInputs(name, main), outputs;
  dsrt::Status status = evaluateFunction(main, model_.weights.get(), inputs, outputs);
  ASSERT_TRUE(status.isOk()) << status.message();

  std::vector<ValueInfo> shapes;
  for (const OwnedTensor &input : inputs) {
    shapes.push_back(shapeOnly(input.dtype, input.shape));
    // Optimum's merged decoder branches on use_cache_branch; leave it unknown only when
    // both branches can run on these inputs (they cannot with an empty past).
    if (input.dtype == DType::Bool)
      shapes.back().value = input;
  }
  ValueInfoMap results;
  status = evaluateShapes(main, model_.weights.get(), shapes, results);
  ASSERT_TRUE(status.isOk()) << status.message();
  mlir::Operation *terminator = main.getBody().front().getTerminator();
  for (unsigned i = 0; i < outputs.size(); ++i) {
    const ValueInfo &info = results[terminator->getOperand(i)];
    EXPECT_EQ(info.dtype, outputs[i].dtype) << "output " << i;
    EXPECT_EQ(info.shape, outputs[i].shape) << "output " << i;
  }
  // Every result outside If branches has a shape (of the branches, only the one taken).
  int missing = 0;
  main.walk([&](mlir::Operation *op) {
    if (op->getParentOfType<onnx::IfOp>())
      return;
    for (mlir::Value result : op->getResults())
      missing += !results.count(result);
  });
  EXPECT_EQ(missing, 0);
}

INSTANTIATE_TEST_SUITE_P(Models, FixtureShapes,
                         ::testing::Values("gpt2-op14", "gpt2-op17", "gpt2-merged", "bert-op17",
                                           "bloom-op17", "gptj-op17", "gptneo-op17",
                                           "llama-op17", "llama-op18", "opt-op17"));

} // namespace
} // namespace dsc::evaluate
