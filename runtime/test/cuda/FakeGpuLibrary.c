/* A tiny shared library that LibraryLoaderTest.cpp copies into temporary folders laid out as
 * a CUDA toolkit, PyTorch's wheels and an explicit path, to see which copy the search picks. */
int dsrt_fake_gpu_library(void) { return 42; }
