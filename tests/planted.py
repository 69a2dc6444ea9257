"""Defects planted in a checkpoint's state before a resume (tests of 08e_resume, for EAGLE-3 and DFlash alike): a
strict resume must refuse each, naming the tensor."""


def without_tensor(name:str):
    "A planter: the state with tensor `name` dropped from the model's."
    def plant(state):
        del state["model"][name]
        return state
    return plant


def without_moments(name:str):
    "A planter: the state with AdamW's step and moments of tensor `name` dropped."
    def plant(state):
        del state["optimizer"]["state"][state["param_names"].index(name)]
        return state
    return plant
