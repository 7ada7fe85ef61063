"""The registry names of the environment libraries a study may name while they are not installed
(brax and the optional JAX libraries), as of the versions tested (constraints-py312.txt): what
answers a name of a missing library with the extra that installs it, and offers its close
names, without importing anything. tests/test_envs_table.py checks them against the installed
registries (a new release that adds names: update them there)."""

NAMES: dict[str, tuple[str, ...]] = {
    "jumanji": (
        "BinPack-v2", "CVRP-v1", "Cleaner-v0", "Connector-v3", "FlatPack-v0", "Game2048-v1", "GraphColoring-v1",
        "JobShop-v0", "Knapsack-v1", "LevelBasedForaging-v0", "MMST-v0", "Maze-v0", "Minesweeper-v0",
        "MultiCVRP-v0", "PacMan-v1", "RobotWarehouse-v0", "RubiksCube-partly-scrambled-v0", "RubiksCube-v0",
        "SearchAndRescue-v0", "SlidingTilePuzzle-v0", "Snake-v1", "Sokoban-v0", "Sudoku-v0", "Sudoku-very-easy-v0",
        "TSP-v1", "Tetris-v0",
    ),
    "navix": (
        "Navix-Empty-5x5-v0", "Navix-Empty-6x6-v0", "Navix-Empty-8x8-v0", "Navix-Empty-16x16-v0",
        "Navix-Empty-Random-5x5-v0", "Navix-Empty-Random-6x6-v0", "Navix-Empty-Random-8x8-v0",
        "Navix-Empty-Random-16x16-v0", "Navix-DoorKey-5x5-v0", "Navix-DoorKey-6x6-v0", "Navix-DoorKey-8x8-v0",
        "Navix-DoorKey-16x16-v0", "Navix-DoorKey-Random-5x5-v0", "Navix-DoorKey-Random-6x6-v0",
        "Navix-DoorKey-Random-8x8-v0", "Navix-DoorKey-Random-16x16-v0", "Navix-FourRooms-v0",
        "Navix-FourRooms-7x7-v0", "Navix-FourRooms-9x9-v0", "Navix-FourRooms-11x11-v0", "Navix-FourRooms-13x13-v0",
        "Navix-FourRooms-15x15-v0", "Navix-FourRooms-17x17-v0", "Navix-KeyCorridorS3R1-v0",
        "Navix-KeyCorridorS3R2-v0", "Navix-KeyCorridorS3R3-v0", "Navix-KeyCorridorS4R3-v0",
        "Navix-KeyCorridorS5R3-v0", "Navix-KeyCorridorS6R3-v0", "Navix-LavaGapS5-v0", "Navix-LavaGapS6-v0",
        "Navix-LavaGapS7-v0", "Navix-SimpleCrossingS9N1-v0", "Navix-SimpleCrossingS9N2-v0",
        "Navix-SimpleCrossingS9N3-v0", "Navix-SimpleCrossingS11N5-v0", "Navix-LavaCrossingS9N1-v0",
        "Navix-LavaCrossingS9N2-v0", "Navix-LavaCrossingS9N3-v0", "Navix-LavaCrossingS11N5-v0",
        "Navix-Dynamic-Obstacles-5x5-v0", "Navix-Dynamic-Obstacles-5x5-Random-v0", "Navix-Dynamic-Obstacles-6x6-v0",
        "Navix-Dynamic-Obstacles-6x6-Random-v0", "Navix-Dynamic-Obstacles-8x8-v0",
        "Navix-Dynamic-Obstacles-16x16-v0", "Navix-DistShift1-v0", "Navix-DistShift2-v0", "Navix-GoToDoor-5x5-v0",
        "Navix-GoToDoor-6x6-v0", "Navix-GoToDoor-8x8-v0", "Navix-Unlock-v0", "Navix-UnlockPickup-v0",
        "Navix-BlockedUnlockPickup-v0", "Navix-RedBlueDoors-6x6-v0", "Navix-RedBlueDoors-8x8-v0",
        "Navix-GoToObject-6x6-N2-v0", "Navix-GoToObject-8x8-N2-v0", "Navix-Fetch-5x5-N2-v0",
        "Navix-Fetch-6x6-N2-v0", "Navix-Fetch-8x8-N3-v0", "Navix-PutNear-6x6-N2-v0", "Navix-PutNear-8x8-N3-v0",
        "Navix-MemoryS17Random-v0", "Navix-MemoryS13Random-v0", "Navix-MemoryS13-v0", "Navix-MemoryS11-v0",
        "Navix-MemoryS9-v0", "Navix-MemoryS7-v0", "Navix-ObstructedMaze-1Dl-v0", "Navix-ObstructedMaze-1Dlh-v0",
        "Navix-ObstructedMaze-1Dlhb-v0", "Navix-ObstructedMaze-2Dl-v0", "Navix-ObstructedMaze-2Dlh-v0",
        "Navix-ObstructedMaze-2Dlhb-v0", "Navix-ObstructedMaze-1Q-v0", "Navix-ObstructedMaze-2Q-v0",
        "Navix-ObstructedMaze-Full-v0", "Navix-MultiRoom-N2-S4-v0", "Navix-MultiRoom-N4-S5-v0",
        "Navix-MultiRoom-N6-v0", "Navix-LockedRoom-v0", "Navix-Playground-v0",
    ),
    "xminigrid": (
        "XLand-MiniGrid-R1-9x9", "XLand-MiniGrid-R1-11x11", "XLand-MiniGrid-R1-13x13", "XLand-MiniGrid-R1-15x15",
        "XLand-MiniGrid-R1-17x17", "XLand-MiniGrid-R2-9x9", "XLand-MiniGrid-R2-11x11", "XLand-MiniGrid-R2-13x13",
        "XLand-MiniGrid-R2-15x15", "XLand-MiniGrid-R2-17x17", "XLand-MiniGrid-R4-9x9", "XLand-MiniGrid-R4-11x11",
        "XLand-MiniGrid-R4-13x13", "XLand-MiniGrid-R4-15x15", "XLand-MiniGrid-R4-17x17", "XLand-MiniGrid-R6-13x13",
        "XLand-MiniGrid-R6-17x17", "XLand-MiniGrid-R6-19x19", "XLand-MiniGrid-R9-16x16", "XLand-MiniGrid-R9-19x19",
        "XLand-MiniGrid-R9-25x25", "MiniGrid-BlockedUnlockPickUp", "MiniGrid-DoorKey-5x5", "MiniGrid-DoorKey-6x6",
        "MiniGrid-DoorKey-8x8", "MiniGrid-DoorKey-16x16", "MiniGrid-Empty-5x5", "MiniGrid-Empty-6x6",
        "MiniGrid-Empty-8x8", "MiniGrid-Empty-16x16", "MiniGrid-EmptyRandom-5x5", "MiniGrid-EmptyRandom-6x6",
        "MiniGrid-EmptyRandom-8x8", "MiniGrid-EmptyRandom-16x16", "MiniGrid-FourRooms", "MiniGrid-LockedRoom",
        "MiniGrid-MemoryS8", "MiniGrid-MemoryS16", "MiniGrid-MemoryS32", "MiniGrid-MemoryS64",
        "MiniGrid-MemoryS128", "MiniGrid-Playground", "MiniGrid-Unlock", "MiniGrid-UnlockPickUp",
    ),
    "pgx": (
        "2048", "animal_shogi", "backgammon", "chess", "connect_four", "gardner_chess", "go_9x9", "go_19x19", "hex",
        "kuhn_poker", "leduc_holdem", "minatar-asterix", "minatar-breakout", "minatar-freeway", "minatar-seaquest",
        "minatar-space_invaders", "othello", "shogi", "sparrow_mahjong", "tic_tac_toe",
    ),
    "brax": (
        "ant", "fast", "halfcheetah", "hopper", "humanoid", "humanoidstandup", "inverted_pendulum",
        "inverted_double_pendulum", "pusher", "reacher", "swimmer", "walker2d",
    ),
    "craftax": (
        "Craftax-Classic-Symbolic-v1", "Craftax-Classic-Pixels-v1", "Craftax-Symbolic-v1", "Craftax-Pixels-v1",
    ),
}
