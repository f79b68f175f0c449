"""Reading and writing: Matrix Market, HDF5 and .npy input, atomic outputs, conversion and generated
matrices."""
