// A structure-aware mutation of a protobuf message (issue 19): one field somewhere in the
// message tree, found through protobuf reflection, is dropped, duplicated, reordered or given
// another value. Byte mutations of a serialised ModelProto mostly break its wire format and
// stop in the parser; these keep it a valid ModelProto, so that the input reaches the importer
// with a graph that is wrong in one place: a node without an attribute, an input renamed to
// another value's name, a dimension of -1, a tensor whose data is one element short.
#ifndef DSC_FUZZ_PROTOMUTATOR_H
#define DSC_FUZZ_PROTOMUTATOR_H

#include <google/protobuf/message.h>

#include <cstdint>
#include <random>

namespace dsc::fuzz {

// Applies one mutation to `message`; false when it has no field to change.
bool mutateMessage(google::protobuf::Message &message, std::mt19937_64 &random);

} // namespace dsc::fuzz

#endif
