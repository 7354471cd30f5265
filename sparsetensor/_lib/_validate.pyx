# placeholder: written by the validation kernel work
def validate_compressed(compressed, plain, plain_size, nthreads):
    raise NotImplementedError

