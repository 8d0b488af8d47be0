#ifndef DSC_DIALECTS_TFM_BASE_TD
#define DSC_DIALECTS_TFM_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Tfm_Dialect : Dialect {
  let name = "tfm";
  let cppNamespace = "::dsc::tfm";
  let summary = "Transformer semantics: what recognition makes of an onnx graph";
  let description = [{
    One op per transformer building block (embedding, norms, linear layers, activations,
    attention, residual adds, the LM head) and the collectives that tensor parallelism
    inserts. Ops work on builtin ranked tensors; batch, sequence and past lengths stay
    dynamic dimensions. Weights are `tfm.weight` handles that name an initializer and say
    how its bytes are to be transformed (transposed, sliced for a TP shard, converted,
    quantized) when the plan writer streams them; the bytes never enter the IR.

    Head counts and sizes in a sharded op are those of the rank's shard; the TP pass
    rewrites them when it splits a layer.
  }];
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    void registerAttributes();
  }];
}

class Tfm_Op<string mnemonic, list<Trait> traits = []>
    : Op<Tfm_Dialect, mnemonic, traits>;

class Tfm_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Tfm_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Tfm_FloatTensor : RankedTensorOf<[AnyFloat]>;
def Tfm_IdsTensor : RankedTensorOf<[I32, I64]>;

#endif
