#include "fuzz/ProtoMutator.h"

#include <google/protobuf/descriptor.h>

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace dsc::fuzz {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

struct FieldSite {
  Message *message;
  const FieldDescriptor *field;
};

// Every field of every message in the tree (set or not: setting an absent field is a
// mutation too), and every name-like string, which renaming draws from so that a node's
// input can become another existing value rather than a name nothing defines.
void collect(Message &message, std::vector<FieldSite> &sites, std::vector<std::string> &names) {
  const Descriptor *descriptor = message.GetDescriptor();
  const Reflection *reflection = message.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor *field = descriptor->field(i);
    sites.push_back({&message, field});
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING &&
        field->type() != FieldDescriptor::TYPE_BYTES) {
      if (field->is_repeated()) {
        for (int j = 0; j < reflection->FieldSize(message, field); ++j)
          names.push_back(reflection->GetRepeatedString(message, field, j));
      } else if (reflection->HasField(message, field)) {
        names.push_back(reflection->GetString(message, field));
      }
    }
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE)
      continue;
    if (field->is_repeated()) {
      for (int j = 0; j < reflection->FieldSize(message, field); ++j)
        collect(*reflection->MutableRepeatedMessage(&message, field, j), sites, names);
    } else if (reflection->HasField(message, field)) {
      collect(*reflection->MutableMessage(&message, field), sites, names);
    }
  }
}

template <typename T> T pick(std::mt19937_64 &random, std::initializer_list<T> values) {
  std::uniform_int_distribution<size_t> index(0, values.size() - 1);
  return values.begin()[index(random)];
}

int64_t newInteger(int64_t old, std::mt19937_64 &random) {
  // Wrapping arithmetic: INT64_MAX + 1 is a fine mutation, but signed overflow is UB.
  const uint64_t bits = static_cast<uint64_t>(old);
  switch (random() % 6) {
  case 0: return static_cast<int64_t>(bits + 1);
  case 1: return static_cast<int64_t>(bits - 1);
  case 2: return static_cast<int64_t>(0 - bits);
  case 3: return static_cast<int64_t>(bits * 2);
  case 4: return static_cast<int64_t>(random() % 17) - 2;
  default:
    return pick<int64_t>(random, {0, -1, std::numeric_limits<int32_t>::max(),
                                  std::numeric_limits<int32_t>::min(),
                                  std::numeric_limits<int64_t>::max(),
                                  std::numeric_limits<int64_t>::min()});
  }
}

double newReal(double old, std::mt19937_64 &random) {
  return pick<double>(random, {0.0, -old, old * 2, 1e30, -1e30, 1e-30,
                               std::numeric_limits<double>::quiet_NaN(),
                               std::numeric_limits<double>::infinity()});
}

// `value` as a field of type T. A double beyond a float's range becomes an infinity of its
// sign, where the plain conversion would be UB.
template <typename T, typename V> T fieldValue(V value) {
  if constexpr (std::is_same_v<T, float>) {
    if (std::isfinite(value) && std::fabs(value) > std::numeric_limits<float>::max())
      return value > 0 ? std::numeric_limits<float>::infinity()
                       : -std::numeric_limits<float>::infinity();
  }
  return static_cast<T>(value);
}

std::string newString(const std::string &old, const std::vector<std::string> &names,
                      bool bytes, std::mt19937_64 &random) {
  if (!bytes && !names.empty() && random() % 2)
    return names[random() % names.size()];
  std::string changed = old;
  switch (random() % 4) {
  case 0: return "";
  case 1:
    changed.resize(changed.empty() ? 0 : random() % changed.size());
    return changed;
  case 2:
    if (!changed.empty())
      changed[random() % changed.size()] ^= static_cast<char>(1u << (random() % 8));
    return changed;
  default:
    changed += bytes ? std::string(1 + random() % 8, '\0') : std::string("_fuzzed");
    return changed;
  }
}

int newEnum(const EnumDescriptor *type, std::mt19937_64 &random) {
  if (random() % 8 == 0)
    return static_cast<int>(random() % 64) - 1;  // maybe no value of the enum
  return type->value(static_cast<int>(random() % type->value_count()))->number();
}

// A new value for a singular field, or for element `index` of a repeated one.
void setValue(Message &message, const FieldDescriptor *field, int index,
              const std::vector<std::string> &names, std::mt19937_64 &random) {
  const Reflection *reflection = message.GetReflection();
  const bool repeated = field->is_repeated();
  switch (field->cpp_type()) {
#define DSC_FUZZ_NUMBER(CPP, Name, Type, make)                                                 \
  case FieldDescriptor::CPP: {                                                                 \
    auto old = repeated ? reflection->GetRepeated##Name(message, field, index)                \
                        : reflection->Get##Name(message, field);                              \
    auto value = fieldValue<Type>(make(old, random));                                         \
    if (repeated)                                                                              \
      reflection->SetRepeated##Name(&message, field, index, value);                           \
    else                                                                                       \
      reflection->Set##Name(&message, field, value);                                          \
    return;                                                                                    \
  }
    DSC_FUZZ_NUMBER(CPPTYPE_INT32, Int32, int32_t, newInteger)
    DSC_FUZZ_NUMBER(CPPTYPE_INT64, Int64, int64_t, newInteger)
    DSC_FUZZ_NUMBER(CPPTYPE_UINT32, UInt32, uint32_t, newInteger)
    DSC_FUZZ_NUMBER(CPPTYPE_UINT64, UInt64, uint64_t, newInteger)
    DSC_FUZZ_NUMBER(CPPTYPE_FLOAT, Float, float, newReal)
    DSC_FUZZ_NUMBER(CPPTYPE_DOUBLE, Double, double, newReal)
#undef DSC_FUZZ_NUMBER
  case FieldDescriptor::CPPTYPE_BOOL:
    if (repeated)
      reflection->SetRepeatedBool(&message, field, index,
                                  !reflection->GetRepeatedBool(message, field, index));
    else
      reflection->SetBool(&message, field, !reflection->GetBool(message, field));
    return;
  case FieldDescriptor::CPPTYPE_ENUM:
    if (repeated)
      reflection->SetRepeatedEnumValue(&message, field, index, newEnum(field->enum_type(), random));
    else
      reflection->SetEnumValue(&message, field, newEnum(field->enum_type(), random));
    return;
  case FieldDescriptor::CPPTYPE_STRING: {
    const bool bytes = field->type() == FieldDescriptor::TYPE_BYTES;
    if (repeated)
      reflection->SetRepeatedString(
          &message, field, index,
          newString(reflection->GetRepeatedString(message, field, index), names, bytes, random));
    else
      reflection->SetString(&message, field,
                            newString(reflection->GetString(message, field), names, bytes, random));
    return;
  }
  case FieldDescriptor::CPPTYPE_MESSAGE:
    // A message field changes by its own fields; setting it makes an empty one.
    if (!repeated)
      reflection->MutableMessage(&message, field);
    return;
  }
}

// Moves element `from` of a repeated field to `to`, keeping the others' order.
void moveElement(Message &message, const FieldDescriptor *field, int from, int to) {
  const Reflection *reflection = message.GetReflection();
  for (int i = from; i < to; ++i)
    reflection->SwapElements(&message, field, i, i + 1);
  for (int i = from; i > to; --i)
    reflection->SwapElements(&message, field, i, i - 1);
}

void duplicateElement(Message &message, const FieldDescriptor *field, int index) {
  const Reflection *reflection = message.GetReflection();
  switch (field->cpp_type()) {
  case FieldDescriptor::CPPTYPE_MESSAGE:
    reflection->AddMessage(&message, field)
        ->CopyFrom(reflection->GetRepeatedMessage(message, field, index));
    break;
#define DSC_FUZZ_ADD(CPP, Name)                                                                \
  case FieldDescriptor::CPP:                                                                   \
    reflection->Add##Name(&message, field, reflection->GetRepeated##Name(message, field, index)); \
    break;
    DSC_FUZZ_ADD(CPPTYPE_INT32, Int32)
    DSC_FUZZ_ADD(CPPTYPE_INT64, Int64)
    DSC_FUZZ_ADD(CPPTYPE_UINT32, UInt32)
    DSC_FUZZ_ADD(CPPTYPE_UINT64, UInt64)
    DSC_FUZZ_ADD(CPPTYPE_FLOAT, Float)
    DSC_FUZZ_ADD(CPPTYPE_DOUBLE, Double)
    DSC_FUZZ_ADD(CPPTYPE_BOOL, Bool)
    DSC_FUZZ_ADD(CPPTYPE_STRING, String)
    DSC_FUZZ_ADD(CPPTYPE_ENUM, EnumValue)
#undef DSC_FUZZ_ADD
  }
  const int last = reflection->FieldSize(message, field) - 1;
  moveElement(message, field, last, index + 1);
}

} // namespace

bool mutateMessage(Message &message, std::mt19937_64 &random) {
  std::vector<FieldSite> sites;
  std::vector<std::string> names;
  collect(message, sites, names);
  if (sites.empty())
    return false;
  const FieldSite site = sites[random() % sites.size()];
  Message &owner = *site.message;
  const FieldDescriptor *field = site.field;
  const Reflection *reflection = owner.GetReflection();
  if (!field->is_repeated()) {
    if (reflection->HasField(owner, field) && random() % 3 == 0)
      reflection->ClearField(&owner, field);
    else
      setValue(owner, field, 0, names, random);
    return true;
  }
  const int size = reflection->FieldSize(owner, field);
  if (size == 0) {
    // An element where there was none: a copy of nothing is an empty or zero one.
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE)
      reflection->AddMessage(&owner, field);
    else if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING)
      reflection->AddString(&owner, field, names.empty() ? "" : names[random() % names.size()]);
    else if (field->cpp_type() == FieldDescriptor::CPPTYPE_INT64)
      reflection->AddInt64(&owner, field, newInteger(0, random));
    else if (field->cpp_type() == FieldDescriptor::CPPTYPE_INT32)
      reflection->AddInt32(&owner, field, static_cast<int32_t>(newInteger(0, random)));
    else
      return mutateMessage(message, random);
    return true;
  }
  const int index = static_cast<int>(random() % size);
  switch (random() % 5) {
  case 0:  // drop one
    moveElement(owner, field, index, size - 1);
    reflection->RemoveLast(&owner, field);
    return true;
  case 1:
    duplicateElement(owner, field, index);
    return true;
  case 2:
    moveElement(owner, field, index, static_cast<int>(random() % size));
    return true;
  case 3:
    if (random() % 4 == 0) {
      reflection->ClearField(&owner, field);
      return true;
    }
    [[fallthrough]];
  default:
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE)
      duplicateElement(owner, field, index);
    else
      setValue(owner, field, index, names, random);
    return true;
  }
}

} // namespace dsc::fuzz
